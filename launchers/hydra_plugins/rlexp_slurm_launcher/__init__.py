"""rlexp's SLURM launcher: hydra-submitit-launcher with per-job resources from `hardware`.

`hydra/launcher=rlexp_slurm` (and `rlexp_local`, its submitit local twin) read each job's
hardware.cpus_per_task, gpus_per_node, timeout_min and partition, and `rlexp_slurm` sets
nodes and tasks per node from hardware.hosts and runtime (slurm_launcher.job_layout: a
multi-controller job is srun's tasks of ONE job). A preset interpolating
`${hardware.cpus_per_task}` into submitit_slurm does NOT do this: Hydra instantiates the
launcher once from the sweep's primary config, so every job gets the first job's resources
(measured: `hardware=a,b` with 1 and 2 CPUs both ran with SLURM_CPUS_PER_TASK=1).
"""
