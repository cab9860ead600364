"""rlexp's Ray launcher, `hydra/launcher=rlexp_ray` (ray_launcher.py). Built on `ray` alone:
hydra-ray-launcher pins cloudpickle<3, which joblib 1.6, the joblib launcher's, refuses."""
