"""run.dry_run=true: each job's plan printed from pre-flight, with nothing launched or written."""

from __future__ import annotations

from pathlib import Path

from rlexp.config.naming import run_name
from rlexp.job.context import JobContext
from rlexp.job.experiment import print_plan
from rlexp.launch.checks import refuse_after_plan
from rlexp.launch.preflight import Preflight, warn_noop


def dry_run(pre: Preflight) -> None:
    """Each job's plan printed, nothing launched; one that does not fit exits 2 after it."""
    if pre.multirun:
        # Range/interval sweeps (Optuna) are kept as their override line: values come later.
        lazy = {k: v[0] for k, v in pre.swept.items() if len(v) == 1 and "=" in v[0]}
        unit = "trial(s)" if pre.trials else "job(s)"
        print(f"rlexp dry run: a sweep of {pre.size} {unit} into {pre.out_dir} "
              "(nothing launched, nothing written)")
        if lazy:
            print(f"  chosen by the sweeper at run time: {', '.join(lazy.values())}")
        if len(pre.jobs) != pre.size:  # a sampler's trials, or a product pre-flight sampled
            print(f"  planned below: {len(pre.jobs)} representative job(s), every swept value "
                  "in one")
    for i, (cfg, overrides, plan) in enumerate(zip(pre.jobs, pre.job_overrides, pre.plans)):
        out = pre.out_dir or Path(".")
        if pre.multirun:
            choices = {g: getattr(cfg, g).name for g in ("algo", "model", "dataset", "hardware")}
            out = out / run_name(choices, overrides)
            print(f"#{i} : {' '.join(overrides)}")
        print_plan(cfg, plan, JobContext(run_dir=out.absolute(), name=out.name, choices={},
                                         overrides=overrides))
        refuse_after_plan(cfg, pre.context, plan)
    warn_noop(pre)  # as the run would, after the plans (a refusal above stays one line)
