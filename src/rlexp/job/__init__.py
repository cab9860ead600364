"""Job layer: one run from start to end. experiment runs it in phases; context (who the job is),
resume, failure, disk, process0 and listeners are its policies; loop, evaluate, stopping (early
stop, pruning), guards; console, sweep_messages and sweep_monitor (what terminals show).
May import: rlexp.engine and every layer below it."""
