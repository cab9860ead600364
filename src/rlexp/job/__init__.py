"""Job layer: one run from start to end.

experiment (the job in phases), loop (the training loop's phases), evaluate, resume (checkpoint
and resume policy), stopping (early stop, sweep pruning), guards (on-policy warnings, NaN
checks), console (what the terminal shows), sweep_messages (a sweep's job labels and events for
the launching process), sweep_monitor (that process's sweep bar and lines).
May import: rlexp.engine and every layer below it.
"""
