"""Configs of the per-job-resource submitit launchers: `rlexp_slurm` and `rlexp_local`."""

# No `from __future__ import annotations`: see hydra_plugins/rlexp_presets/config.py.
from dataclasses import dataclass
from typing import Optional

from hydra.core.config_store import ConfigStore

try:  # the `slurm` extra; without it these launchers simply do not exist
    from hydra_plugins.hydra_submitit_launcher.config import LocalQueueConf, SlurmQueueConf
except ImportError:  # pragma: no cover - exercised only without hydra-submitit-launcher
    SlurmQueueConf = LocalQueueConf = None  # type: ignore[assignment,misc]

if SlurmQueueConf is not None:

    @dataclass
    class RlexpSlurmConf(SlurmQueueConf):
        _target_: str = "hydra_plugins.rlexp_slurm_launcher.slurm_launcher.RlexpSlurmLauncher"
        # Resources: None = the job's own hardware.<same name> (per job). A value set here
        # applies to every job of the sweep and wins over the hardware group.
        # Wall-clock limit per job, minutes (hardware.timeout_min).
        timeout_min: Optional[int] = None  # type: ignore[assignment]
        cpus_per_task: Optional[int] = None  # CPUs per task (hardware.cpus_per_task)
        gpus_per_node: Optional[int] = None  # GPUs per node (hardware.gpus_per_node; 0: none)
        # SLURM partition (hardware.partition; None = the cluster's default partition).
        partition: Optional[str] = None
        # Nodes per job; None = from the job's hardware (slurm_launcher.job_layout: hosts
        # under hardware.runtime=multi_controller, else 1).
        nodes: Optional[int] = None  # type: ignore[assignment]
        # Tasks (processes) per node; None = from the job's hardware (job_layout: one per
        # host, all on one node for CPU profiles like cpu-2host).
        tasks_per_node: Optional[int] = None  # type: ignore[assignment]

    @dataclass
    class RlexpLocalConf(LocalQueueConf):
        _target_: str = "hydra_plugins.rlexp_slurm_launcher.slurm_launcher.RlexpLocalLauncher"
        # Same per-job rule as rlexp_slurm (the local executor honours timeout and GPUs).
        timeout_min: Optional[int] = None  # type: ignore[assignment]
        cpus_per_task: Optional[int] = None
        gpus_per_node: Optional[int] = None

    cs = ConfigStore.instance()
    cs.store(group="hydra/launcher", name="rlexp_slurm", node=RlexpSlurmConf,
             provider="rlexp_slurm_launcher")
    cs.store(group="hydra/launcher", name="rlexp_local", node=RlexpLocalConf,
             provider="rlexp_slurm_launcher")
