"""A sweep's jobs and the process that launched them, across processes: each job's label
(`[3/8 β=0.04 G=4]`), its lines labelled whole, and, under the joblib launcher, its events
(start, lines on a terminal, end) for rlexp.job.sweep_monitor."""

from __future__ import annotations

import contextlib
import json
import os
import sys
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from rlexp.base.events import Listener
from rlexp.job.console import LabelledStream, restore_logs, route_logs

# What the launching process tells a sweep's jobs in their environment (SweepEnv).
SWEEP_SIZE_ENV = "RLEXP_SWEEP_SIZE"
SWEEP_KEYS_ENV = "RLEXP_SWEEP_KEYS"
SWEEP_RELAY_ENV = "RLEXP_SWEEP_RELAY"
SWEEP_TERMINAL_ENV = "RLEXP_SWEEP_TERMINAL"


def job_label(index: int, size: int | None, overrides: Sequence[str], keys: Sequence[str]) -> str:
    """'[3/8 β=0.04 G=4]': the job's number of the sweep's `size` and its swept values."""
    from rlexp.config.naming import label, override_values
    head = f"{index + 1}/{size}" if size else str(index + 1)
    return f"[{' '.join(x for x in (head, label(override_values(overrides), keys)) if x)}]"


@dataclass
class SweepEnv:
    size: int | None = None  # jobs in the sweep (None: unknown)
    keys: list[str] = field(default_factory=list)  # the keys the sweep varies, for the labels
    relay: Path | None = None  # the joblib launcher's event dir: each job writes <index>.jsonl
    terminal: bool = False  # the launcher draws a bar on a terminal: jobs send it their lines

    @classmethod
    def from_env(cls, environ: Mapping[str, str] = os.environ) -> "SweepEnv":
        size = environ.get(SWEEP_SIZE_ENV, "")
        relay = environ.get(SWEEP_RELAY_ENV)
        return cls(size=int(size) if size.isdigit() else None,
                   keys=[k for k in environ.get(SWEEP_KEYS_ENV, "").split(",") if k],
                   relay=Path(relay) if relay else None,
                   terminal=environ.get(SWEEP_TERMINAL_ENV) == "1")

    def to_env(self) -> dict[str, str]:
        out = {SWEEP_SIZE_ENV: str(self.size or ""), SWEEP_KEYS_ENV: ",".join(self.keys),
               SWEEP_TERMINAL_ENV: "1" if self.terminal else "0"}
        if self.relay is not None:
            out[SWEEP_RELAY_ENV] = str(self.relay)
        return out


class Relay:
    """A job's events (and, on a terminal, its lines) for the launching process: one JSON
    record a line, appended to <relay dir>/<job index>.jsonl."""

    def __init__(self, path: Path):
        self.path = path
        self._lock = threading.Lock()

    def send(self, **record: Any) -> None:
        line = json.dumps({"t": time.time(), **record}) + "\n"
        # the sweep's display is a nicety: never fail a job for it
        with self._lock, contextlib.suppress(OSError):
            with open(self.path, "a", encoding="utf-8") as handle:
                handle.write(line)


def _line_writer(stream: Any) -> Callable[[str], None]:
    def write_line(line: str) -> None:
        stream.write(line + "\n")
        stream.flush()
    return write_line


class JobOutput(Listener):
    """What this process's current job prints through: its label in a sweep, the relay to the
    launching process, and (a run listener) the status the run ended with."""

    def __init__(self, label: str | None, relay: Relay | None):
        self.label = label
        self.relay = relay
        self.status: str | None = None

    def on_run_end(self, status: str, summary: dict[str, Any]) -> None:
        self.status = status


_job: JobOutput | None = None


def current_job() -> JobOutput | None:
    """The job job_output is running in this process (None outside it)."""
    return _job


@contextlib.contextmanager
def job_output(index: int | None, overrides: Sequence[str],
               environ: Mapping[str, str] = os.environ) -> Iterator[JobOutput]:
    """A job's console: log records on stderr in ConsoleFormatter's format; in a sweep
    (`index`), every line labelled, and under joblib its events sent to the launching process."""
    global _job
    sweep = SweepEnv.from_env(environ) if index is not None else SweepEnv()
    relay = Relay(sweep.relay / f"{index}.jsonl") if sweep.relay is not None else None
    label = job_label(index, sweep.size, overrides, sweep.keys) if index is not None else None
    out = JobOutput(label, relay)
    streams = sys.stdout, sys.stderr
    if label is not None:
        def to_relay(line: str) -> None:
            relay.send(kind="line", text=line)
        relayed = relay is not None and sweep.terminal
        writers = (to_relay, to_relay) if relayed else map(_line_writer, streams)
        sys.stdout, sys.stderr = (LabelledStream(label, write) for write in writers)
    changed = route_logs(sys.stderr, sweep=label is not None)
    previous, _job = _job, out
    if relay is not None:
        relay.send(kind="start", label=label)
    failed = True
    try:
        yield out
        failed = False
    finally:
        _job = previous
        for stream in (sys.stdout, sys.stderr):
            if isinstance(stream, LabelledStream):
                stream.end_line()
        sys.stdout, sys.stderr = streams
        restore_logs(changed)
        if relay is not None:
            relay.send(kind="end", status=out.status or ("FAILED" if failed else "FINISHED"))


def failed_jobs(sweep_dir: Path, keys: Sequence[str] = ()) -> list[str]:
    """The line of each job of a sweep that did not finish, from its summary.json:
    'rlexp: error: [β=0.04] reward exact raised ValueError: ... at step 3'."""
    from rlexp.base.summary import read_summary
    from rlexp.config.naming import label, override_values
    lines = []
    for path in sorted(Path(sweep_dir).glob("*/summary.json")):
        summary = read_summary(path.parent)
        if not summary or summary.get("status") not in ("FAILED", "KILLED"):
            continue
        overrides = summary.get("overrides") or []
        name = label(override_values(overrides), keys) or summary.get("name") or path.parent.name
        error = "error: " if summary["status"] == "FAILED" else ""
        why = summary.get("error") or summary["status"].lower()
        lines.append(f"rlexp: {error}[{name}] {why}")
    return lines


def end_of_sweep(sweep_dir: Path | None) -> int:
    """After a sweep, each failed job's line again; the command's exit status (1: any failed)."""
    if sweep_dir is None or not Path(sweep_dir).is_dir():
        return 0
    lines = failed_jobs(sweep_dir, SweepEnv.from_env().keys)
    for line in lines:
        print(line, file=sys.stderr, flush=True)
    return 1 if lines else 0
