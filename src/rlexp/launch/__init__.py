"""Launch layer: the command line before any job runs. May import: rlexp.job and below.

args (the command line, parsed once, first), preflight (every job composed and checked before
Hydra runs), checks (its refusals: one line, exit 2), dry_run (each job's plan, nothing
launched). The sweep launchers are Hydra plugins in launchers/hydra_plugins/.
"""
