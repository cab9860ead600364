"""rlexp's defaults for plugins it does not own: joblib runs 2 jobs at a time with its workers
warmed up while Hydra prepares the sweep; the basic sweeper does not compose a second time
the jobs rlexp's pre-flight checked."""
