"""Job layer: one run from start to end.

experiment (the job in phases: resolve state, build, restore, train, finish), loop (the
training loop as named phases), evaluate, resume (checkpoint and resume policy), stopping
(early stop and sweep pruning), guards (on-policy warnings, NaN checks), console (what the
terminal shows), sweep_messages (a sweep's job labels, and its events for the launching
process), sweep_monitor (a joblib sweep's bar and lines in the process that launches it).
May import: rlexp.engine and every layer below it.
"""
