"""rlexp's defaults for launchers it does not own (currently: joblib runs 2 jobs at a time)."""
