"""A sweep seen from the process that launches it (the joblib launcher): its jobs' event files
(sweep_messages.job_output writes them) become one bar on a terminal, else a line per job done."""

from __future__ import annotations

import atexit
import contextlib
import json
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from rlexp.job.console import is_terminal


def sweep_eta(durations: Sequence[float], running_for: Sequence[float], queued: int,
              workers: int) -> float | None:
    """Seconds left, from finished jobs' mean duration (None before the first), `workers` wide."""
    if not durations:
        return None
    mean = sum(durations) / len(durations)
    return (sum(max(mean - ran, 0.0) for ran in running_for) + queued * mean) / max(1, workers)


def short_duration(seconds: float) -> str:
    seconds = int(round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds // 60 % 60:02d}m"


class SweepMonitor:
    """A joblib sweep from its jobs' event files; lives across the launcher's (Optuna's) batches."""

    POLL_S = 0.2

    def __init__(self, relay: Path, size: int, workers: int, stream: Any = None,
                 terminal: bool | None = None):
        self.relay = relay
        self.size = size
        self.workers = workers
        self.stream = stream or sys.stderr
        self.terminal = is_terminal(self.stream) if terminal is None else terminal
        self.started: dict[int, float] = {}
        self.ended: dict[int, tuple[str, float]] = {}
        self.bar: Any = None
        self._offsets: dict[Path, int] = {}
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.closed = False

    @property
    def failed(self) -> int:
        return sum(1 for status, _ in self.ended.values() if status != "FINISHED")

    @property
    def done(self) -> int:
        return len(self.ended)

    @property
    def running(self) -> int:
        return sum(1 for idx in self.started if idx not in self.ended)

    def eta(self) -> float | None:
        now = time.time()
        durations = [end - self.started.get(idx, end) for idx, (status, end) in
                     self.ended.items() if status == "FINISHED" and idx in self.started]
        running = [now - t for idx, t in self.started.items() if idx not in self.ended]
        queued = max(0, self.size - self.done - len(running))
        return sweep_eta(durations, running, queued, self.workers)

    def status(self) -> str:
        """'2 running, 1 failed, ~4m10s left'."""
        parts = [f"{self.running} running"]
        if self.failed:
            parts.append(f"{self.failed} failed")
        eta = self.eta()
        if eta is not None and self.done < self.size:
            parts.append(f"~{short_duration(eta)} left")
        return ", ".join(parts)

    def poll(self) -> None:
        """Read what the jobs wrote since the last poll and show it."""
        with self._lock:
            records = []
            for path in sorted(self.relay.glob("*.jsonl")):
                try:
                    index = int(path.stem)
                    with open(path, "rb") as handle:
                        handle.seek(self._offsets.get(path, 0))
                        data = handle.read()
                except (OSError, ValueError):
                    continue
                complete = data[:data.rfind(b"\n") + 1]  # a line being written waits
                self._offsets[path] = self._offsets.get(path, 0) + len(complete)
                for line in complete.decode("utf-8", "replace").splitlines():
                    try:
                        record = json.loads(line)
                    except ValueError:
                        continue
                    records.append((float(record.get("t", 0.0)), index, record))
            for _, index, record in sorted(records, key=lambda r: r[:2]):  # jobs interleaved
                self._event(index, record)
            self._draw()

    def _event(self, index: int, record: dict[str, Any]) -> None:
        kind = record.get("kind")
        when = float(record.get("t", time.time()))
        if kind == "line":
            self._write(str(record.get("text", "")))
        elif kind == "start":
            self.started[index] = when
            self.ended.pop(index, None)
        elif kind == "end" and index not in self.ended:
            self.started.setdefault(index, when)
            self.ended[index] = (str(record.get("status", "FAILED")), when)
            if not self.terminal:
                self._write(f"rlexp: sweep {self.done}/{self.size} done, {self.status()}")

    def finish(self, results: Mapping[int, bool]) -> None:
        """The launcher's results of a batch, for jobs that ended without an end event."""
        self.poll()
        with self._lock:
            for index, ok in results.items():
                if index not in self.ended:
                    self._event(index, {"kind": "end", "status": "FINISHED" if ok else "FAILED"})
                elif not ok and self.ended[index][0] == "FINISHED":
                    self.ended[index] = ("FAILED", self.ended[index][1])
            self._draw()
        if self.done >= self.size:
            self.close()

    def _write(self, text: str) -> None:
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def _draw(self) -> None:
        if not self.terminal or self.closed:
            return
        if self.bar is None:
            if not self.started:  # Hydra lists the jobs first: the bar comes with the first
                return
            from tqdm import tqdm
            # The figures lead, the bar takes what is left (a narrow terminal trims the end).
            self.bar = tqdm(total=self.size, file=self.stream, dynamic_ncols=True, leave=True,
                            desc="sweep", bar_format="{desc} |{bar}|")
        shown = f"sweep {self.done}/{self.size} done, {self.status()}"
        if shown != self.bar.desc:  # a redraw only when what it says changed
            self.bar.n = self.done
            self.bar.set_description_str(shown, refresh=True)

    def start(self) -> None:
        if self._thread is None:
            self._thread = threading.Thread(target=self._run, daemon=True,
                                            name="rlexp-sweep-monitor")
            self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self.POLL_S):
            with contextlib.suppress(Exception):  # a display must never stop a sweep
                self.poll()

    def close(self) -> None:
        if self.closed:
            return
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout=2)
        self.poll()
        self.closed = True
        if self.bar is not None:
            self.bar.close()
            self.bar = None


_monitor: SweepMonitor | None = None


def sweep_monitor(size: int, workers: int) -> SweepMonitor:
    """This process's sweep monitor, started; its event dir goes when the process ends."""
    global _monitor
    if _monitor is None or _monitor.closed:
        relay = Path(tempfile.mkdtemp(prefix="rlexp-sweep-"))
        atexit.register(shutil.rmtree, relay, True)
        _monitor = SweepMonitor(relay, size, workers)
        _monitor.start()
        atexit.register(_monitor.close)  # a sweep that ended early (Optuna's failure rate)
    return _monitor
