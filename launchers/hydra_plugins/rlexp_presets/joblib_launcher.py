"""Hydra's joblib launcher, with the sweep's progress shown by rlexp.

What the sweep shows (rlexp.job.sweep_messages): each job's lines carry its label
(`[3/8 beta=0.04 G=4]`); the workers, which loky starts during the launch, inherit the labels'
inputs and the dir of their events from this process's environment. This process watches
those events (rlexp.job.sweep_monitor): on a terminal it draws the only bar, with the jobs'
lines printed above it; piped, one line per finished job. The plugin's
`Joblib.Parallel(n_jobs=2, backend=loky, ...)` line is dropped.
"""

from __future__ import annotations

import logging
import os
import sys
from typing import Any, Sequence

from hydra.core.utils import JobReturn
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher


class _DropParallelLine(logging.Filter):
    """The plugin logs its joblib.Parallel arguments at every launch: nothing to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Joblib.Parallel(")


def quiet_parallel_line() -> None:
    core = logging.getLogger("hydra_plugins.hydra_joblib_launcher._core")
    if not any(isinstance(f, _DropParallelLine) for f in core.filters):
        core.addFilter(_DropParallelLine())


def sweep_env(job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
              relay: Any, terminal: bool) -> dict[str, str]:
    """What each job needs to label its lines and report to this process: the sweep's size
    and swept keys as rlexp's entry point found them (else this batch's: the keys whose
    values differ), and the monitor's event dir."""
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
    return SweepEnv(size=size, keys=keys, relay=relay, terminal=terminal).to_env()


class RlexpJoblibLauncher(JoblibLauncher):
    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        from hydra.core.utils import JobStatus
        from joblib import effective_n_jobs

        from rlexp.job import sweep_messages, sweep_monitor

        quiet_parallel_line()
        terminal = bool(getattr(sys.stderr, "isatty", lambda: False)())
        probe = sweep_env(job_overrides, initial_job_idx, None, terminal)
        size = int(probe[sweep_messages.SWEEP_SIZE_ENV])
        workers = min(effective_n_jobs(self.joblib.get("n_jobs", -1)), size)
        monitor = sweep_monitor.sweep_monitor(size, workers)
        # loky starts the workers during the launch: they inherit this environment
        os.environ.update(sweep_env(job_overrides, initial_job_idx, monitor.relay, terminal))
        results: dict[int, bool] = {}
        try:
            runs = super().launch(job_overrides, initial_job_idx)
            results = {initial_job_idx + i: r.status == JobStatus.COMPLETED
                       for i, r in enumerate(runs)}
            return runs
        finally:
            monitor.finish(results or {initial_job_idx + i: False
                                       for i in range(len(job_overrides))})
