"""Job layer: one run from start to end.

experiment (the job: lock, plan, engine, listeners, summary), loop (the training loop as
named phases), evaluate, resume (checkpoint and resume policy), stopping (early stop and
sweep pruning), guards (on-policy warnings, NaN checks), console (what the terminal shows),
sweep_monitor (a joblib sweep's bar and lines in the process that launches it).
May import: rlexp.engine and every layer below it.
"""
