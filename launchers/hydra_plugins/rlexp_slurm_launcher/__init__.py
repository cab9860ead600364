"""rlexp's SLURM launchers, `hydra/launcher=rlexp_slurm` and `rlexp_local` (slurm_launcher.py)."""
