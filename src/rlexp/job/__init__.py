"""Job layer: one run from start to end.

experiment (the job in phases), context (who the job is: run dir, choices, sweep) and the
policies it calls: resume (checkpoints, an earlier attempt's state), failure (a single run's or
a sweep job's end), disk (a full disk), process0 (a multi-controller run's process 0),
listeners; loop (the training loop's phases), evaluate, stopping (early stop, sweep pruning),
guards (on-policy warnings, NaN checks), console (what the terminal shows), sweep_messages (a
sweep's job labels and events for the launching process), sweep_monitor (that process's sweep
bar and lines).
May import: rlexp.engine and every layer below it.
"""
