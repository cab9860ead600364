"""rlexp's defaults for a plugin it does not own: joblib runs 2 jobs at a time, and the sweep's
progress is shown by rlexp."""
