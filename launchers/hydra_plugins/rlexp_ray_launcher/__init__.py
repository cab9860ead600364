"""rlexp's Ray launcher: `hydra/launcher=rlexp_ray` runs each sweep job as Ray tasks on a
running Ray cluster (`ray start --head`), one task per process of the job.

Built on `ray` alone (no hydra-ray-launcher: it pins cloudpickle<3, which joblib 1.6, the
joblib launcher's, refuses). A job whose hardware runs one process per host
(hardware.runtime=multi_controller) gets one task per host, started together in a placement
group and joined by jax.distributed through JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES and
JAX_PROCESS_ID; it stays one job and one child run.
"""
