"""A full disk (ENOSPC, or orbax's RESOURCE_EXHAUSTED) stops the run FAILED with one line naming
the path and its free space: the unfinished checkpoint and *.tmp files go, and a reserve file,
deleted first, leaves room for summary.json and the tracker's last records. Logging then stops
raising (the log files may be on the full disk)."""

from __future__ import annotations

import contextlib
import logging
import os
from pathlib import Path
from typing import Any

from rlexp.base.events import Listener, Listeners
from rlexp.base.summary import write_summary
from rlexp.engine.checkpoint_store import DiskFull, disk_full, remove_unfinished

log = logging.getLogger("rlexp")

RERUN = "free some space, then rerun the same command"  # what every full-disk line asks
# The reserve file: summary.json and the tracker's last records take a few KiB of it.
RESERVE_FILE = ".rlexp-reserve"
RESERVE_BYTES = 512 * 1024


def found_full(exc: BaseException, run_dir: Path) -> DiskFull | None:
    """The full disk `exc` comes from, else None."""
    full = disk_full(exc, run_dir)
    if full is not None:
        logging.raiseExceptions = False
    return full


def clean_up(run_dir: Path, checkpoints: Any = None) -> None:
    """What writes that hit the full disk left: the unfinished checkpoint, then *.tmp files."""
    if checkpoints is not None:
        remove_unfinished(checkpoints)
    for path in run_dir.glob("*.tmp"):
        with contextlib.suppress(OSError):
            path.unlink()


def try_summary(run_dir: Path, summary: dict[str, Any]) -> DiskFull | None:
    """summary.json written; else the full disk that stopped it (any other error raises)."""
    try:
        write_summary(run_dir, summary)
    except OSError as exc:
        full = disk_full(exc, run_dir)
        if full is None:
            raise
        return full
    return None


class DiskReserve:
    def __init__(self, run_dir: Path | None):
        self.path = run_dir / RESERVE_FILE if run_dir is not None else None
        if self.path is None:  # a process other than 0 writes nothing to keep room for
            return
        try:
            with open(self.path, "wb") as handle:
                os.posix_fallocate(handle.fileno(), 0, RESERVE_BYTES)  # blocks, not a hole
        except (OSError, AttributeError):  # no room (pre-flight would have said) or no API
            self.release()

    def release(self) -> None:
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)


class Observers(Listeners):
    """The run's listeners: a failing one is logged, a full disk raised once all had the event."""

    def __init__(self, listeners: list[Listener], run_dir: Path):
        super().__init__(listeners)
        self.run_dir = run_dir

    def _each(self, hook: str, *args: Any, **kwargs: Any) -> None:
        full = None
        for listener in self.listeners:
            try:
                getattr(listener, hook)(*args, **kwargs)
            except Exception as exc:  # observers must never stop training, but for a full disk
                found = disk_full(exc, self.run_dir) if hook != "on_run_end" else None
                if found is None:
                    log.warning("%s.%s failed: %s", type(listener).__name__, hook, exc)
                full = full or found
        if full is not None:
            raise full
