"""How a job's failure ends, chosen once per job (`policy`): a single run says its one line
and exits (2: bad input, 1: failed, 143: killed); a sweep's job never exits: it leaves its
FAILED summary and returns NaN, so the other jobs go on (Hydra's sweepers take NaN as a failed
trial, and the launching process counts it from the job's summary and its end record)."""

from __future__ import annotations

import logging
import math
import shutil
import sys
from typing import TYPE_CHECKING, NoReturn

from rlexp.base.errors import UserError, fail
from rlexp.base.lock import Busy, is_lock_file
from rlexp.base.redact import redact_text
from rlexp.base.summary import write_summary
from rlexp.data.rewards import RewardFailed
from rlexp.job import loop, process0
from rlexp.job.console import FILE_ONLY
from rlexp.job.disk import RESERVE_FILE
from rlexp.job.sweep_messages import current_job

if TYPE_CHECKING:
    from rlexp.job.context import JobContext


class SingleRun:
    """A run of its own: every failure exits the process."""

    def __init__(self, job: JobContext):
        self.job = job

    def refused(self, message: str) -> NoReturn:
        """Bad input found after Hydra made the run dir: its line, nothing half-made left."""
        run_dir = self.job.run_dir
        hydra_only = {".hydra", "rlexp.log", "__main__.log", "rlexp.lock", RESERVE_FILE}
        if run_dir.is_dir() and all(p.name in hydra_only or is_lock_file(p.name)
                                    for p in run_dir.iterdir()):
            shutil.rmtree(run_dir, ignore_errors=True)
        fail(message)

    def bad_input(self, message: str) -> float:
        fail(message)

    def busy(self, exc: Busy) -> NoReturn:
        """Another command holds the run dir: exit 2 before rlexp writes anything."""
        fail(str(exc))

    def build_failed(self, exc: BaseException) -> None:
        """The build raised: the job's handler says it (and writes the FAILED summary)."""

    def failed(self, line: str) -> float:
        """A failure outside the loop: its line, then exit 1 (a sweep's job: NaN)."""
        process0.say(f"rlexp: error: {line}", error=True)
        sys.exit(1)

    def ended(self, status: str) -> float:
        """Training ended KILLED or FAILED, its line said: exit 143 or 1 (a sweep's job: NaN)."""
        sys.exit(143 if status == "KILLED" else 1)


class SweepJob(SingleRun):
    """One job of a multirun: it fails, the others go on."""

    def refused(self, message: str) -> NoReturn:
        failed_summary(self.job, message)
        raise UserError(message)

    def bad_input(self, message: str) -> float:
        return self.failed(message)

    def busy(self, exc: Busy) -> NoReturn:
        raise exc  # this job fails without touching the dir; the summary is the owner's

    def build_failed(self, exc: BaseException) -> None:
        failed_summary(self.job, error_line(exc))  # the sweep summary shows why

    def failed(self, line: str) -> float:
        process0.say(f"rlexp: error: {line}", error=True)
        sweep_job = current_job()
        if sweep_job is not None and sweep_job.status is None:
            sweep_job.status = "FAILED"
        return math.nan

    def ended(self, status: str) -> float:
        return math.nan


def policy(job: JobContext) -> SingleRun:
    return SweepJob(job) if job.sweep_dir is not None else SingleRun(job)


def failed_summary(job: JobContext, error: str) -> None:
    if process0.here():
        job.run_dir.mkdir(parents=True, exist_ok=True)
        write_summary(job.run_dir, {**job.identity(), "status": "FAILED", "error": error,
                                    "objective": None})


def error_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def failure_line(exc: BaseException) -> str:
    """A failure in one line, its cause and where it struck: 'reward exact raised ValueError:
    grader down at step 3' (a reward plug-in names itself)."""
    cause = str(exc) if isinstance(exc, RewardFailed) else error_line(exc)
    where = loop.failed_at(exc)
    return redact_text(f"{cause} {where}" if where else cause)


def log_traceback(exc: BaseException) -> None:
    """The traceback, for the run's rlexp.log only: the console has the one line."""
    logging.getLogger(FILE_ONLY).error("the run failed: %s", failure_line(exc), exc_info=exc)
