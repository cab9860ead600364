"""rlexp's Ray launcher: `hydra/launcher=rlexp_ray` runs each sweep job as Ray tasks on a
running Ray cluster (`ray start --head`), one task per process of the job (ray_launcher.py);
a multi-controller job stays one job and one child run.

Built on `ray` alone (no hydra-ray-launcher: it pins cloudpickle<3, which joblib 1.6, the
joblib launcher's, refuses).
"""
