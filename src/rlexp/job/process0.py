"""Process 0's share of a multi-controller run: every process runs the job; process 0 alone
prints, writes summary.json, progress.json and the export, and opens the MLflow run."""

from __future__ import annotations

import sys
from typing import Any, Callable, TypeVar

from rlexp.base import runtime

T = TypeVar("T")


def here() -> bool:
    """This is process 0 (or the only process)."""
    return runtime.is_main_process()


def only(fn: Callable[..., T], *args: Any) -> T | None:
    """fn(*args) on process 0; None on the others."""
    return fn(*args) if runtime.is_main_process() else None


def say(line: str, *, error: bool = False) -> None:
    """One line on process 0's console: stderr for an error or a stop, else stdout."""
    if runtime.is_main_process():
        print(line, file=sys.stderr if error else sys.stdout, flush=True)
