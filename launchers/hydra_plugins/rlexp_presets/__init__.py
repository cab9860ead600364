"""rlexp's defaults for launchers it does not own (currently: joblib runs 2 jobs at a time,
its workers warmed up while Hydra prepares the sweep)."""
