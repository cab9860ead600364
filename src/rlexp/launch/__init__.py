"""Launch layer: the command line before any job runs.

preflight (Hydra composition of every job, the refusals that end in one line and exit 2),
checks (those refusals, one named list), args (the command line, parsed once, first),
dry_run (each job's plan printed, nothing launched). The sweep launchers themselves are
Hydra plugins in launchers/hydra_plugins/.
May import: rlexp.job and every layer below it.
"""
