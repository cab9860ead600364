"""Launch layer: the command line before any job runs; may import rlexp.job and below. args (parsed
once, first), preflight (every job composed and checked before Hydra runs), checks (its refusals:
one line, exit 2), dry_run (each job's plan, nothing launched). Sweep launchers: launchers/."""
