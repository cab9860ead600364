"""Hydra's joblib launcher, with the sweep's progress shown by rlexp. Each job's lines carry its
label (`[3/8 beta=0.04 G=4]`, rlexp.job.sweep_messages); this process watches the jobs' events
(rlexp.job.sweep_monitor): on a terminal it draws the only bar, the jobs' lines above it; piped,
one line per finished job."""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher


def _not_parallel_line(record: logging.LogRecord) -> bool:
    """The plugin logs its joblib.Parallel arguments at every launch: nothing to act on."""
    return not str(record.msg).startswith("Joblib.Parallel(")


def quiet_parallel_line() -> None:
    core = logging.getLogger("hydra_plugins.hydra_joblib_launcher._core")
    if _not_parallel_line not in core.filters:
        core.addFilter(_not_parallel_line)


def sweep_env(job_overrides: Sequence[Sequence[str]], initial_job_idx: int, terminal: bool) -> Any:
    """What each job needs to label its lines (a SweepEnv without an event dir): the sweep's
    size and swept keys as rlexp's entry point found them, else this batch's differing keys."""
    from rlexp.job.sweep_messages import SweepEnv
    known = SweepEnv.from_env()
    size = known.size or initial_job_idx + len(job_overrides)
    keys = known.keys
    if not keys:
        values: dict[str, set[str]] = {}
        for job in job_overrides:
            for override in job:
                key, _, value = override.lstrip("+~").partition("=")
                values.setdefault(key, set()).add(value)
        keys = [k for k, v in values.items() if len(v) > 1 and not k.startswith("hydra")]
    return SweepEnv(size=size, keys=keys, terminal=terminal)


class RlexpJoblibLauncher(JoblibLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        from hydra.core.utils import JobStatus
        from joblib import effective_n_jobs

        from rlexp.job import sweep_monitor
        quiet_parallel_line()
        terminal = bool(getattr(sys.stderr, "isatty", lambda: False)())
        env = sweep_env(job_overrides, initial_job_idx, terminal)
        workers = min(effective_n_jobs(self.joblib.get("n_jobs", -1)), env.size)
        monitor = sweep_monitor.sweep_monitor(env.size, workers)
        env.relay = monitor.relay
        # loky starts the workers during the launch: they inherit the labels and event dir here
        os.environ.update(env.to_env())
        results = {initial_job_idx + i: False for i in range(len(job_overrides))}
        try:
            runs = super().launch(job_overrides, initial_job_idx)
            results = {initial_job_idx + i: r.status == JobStatus.COMPLETED
                       for i, r in enumerate(runs)}
            return runs
        finally:
            monitor.finish(results)
