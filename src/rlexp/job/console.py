"""What a run prints: progress, evaluation lines and a before -> after table at the end.

On a terminal the progress is a bar (step, reward, accuracy, s/step). When stdout/stderr is
not a terminal (a file, a pipe, a scheduler's log) a bar's carriage returns pile up into one
huge line, so progress becomes plain periodic lines instead, one per event. run.progress=false
hides the bar and the step lines only: evaluation lines and the final table stay.

`quiet_third_party()` removes lines that tell a user nothing they can act on (absl's
resharding notes, MLflow's table creation and system-metrics chatter, Hugging Face's offline
retries, urllib3's retries against a store that is down); warnings and errors of those
libraries still show.

Everything a job shows goes to stderr in one format ('rlexp: ...', 'rlexp: warning: ...'):
log records too (route_logs; Hydra's job logging would print them on stdout with a
timestamp). Each start-up phase says so as it begins (phase(): building the model, the warm
start, compiling), so the first line comes before JAX is imported.

Sweeps: every line of a job carries its label, `[3/8 beta=0.04 G=4]` (job_label, through
job_output's LabelledStream), one whole line per write, so jobs running side by side never mix
within a line. Under the joblib launcher the launching process watches the jobs' events
(rlexp.job.sweep_monitor): on a terminal it draws the only bar and prints the jobs' lines
above it, the jobs drawing none; piped, it adds one line per finished job.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import sys
import threading
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Mapping, Sequence

from rlexp.base import runtime
from rlexp.base.events import Listener, RunInfo
from rlexp.config.schema import Config

# Imported inside functions, on purpose: tqdm is imported only when a progress bar is drawn (a
# terminal).

# Rows of the end-of-run table: (metric, label).
TABLE = (("eval/accuracy", "accuracy"), ("eval/partial_accuracy", "partial accuracy"),
         ("eval/format_accuracy", "format accuracy"), ("eval/pass_at_k", "pass@k"),
         ("eval/mean_reward", "mean reward"))
# Without a terminal: about this many step lines per run, and at least one per interval.
LINES_PER_RUN = 20
MAX_SILENCE_S = 60.0

# Messages of third-party loggers that are noise (matched as substrings): Tunix logs the
# first two through absl as warnings on every CPU run (tunix/rl/utils.py, rl_cluster.py);
# huggingface_hub retries each HEAD request with a warning when there is no network
# ("'(MaxRetryError(...))' thrown while requesting HEAD https://... Retrying in 1s").
NOISE = {
    "absl": ("Resharding model from", "Skipping non-TPU device"),
    "huggingface_hub": ("thrown while requesting", "Returning existing local_dir"),
    "huggingface_hub.utils._http": ("thrown while requesting",),
    # MLflow's requests retry through urllib3, which logs each retry as a warning: a store
    # that is down printed ~20 "Retrying (Retry(total=0, ...)) after connection broken by
    # ..." lines in a 2-step run; rlexp says once that the store is unreachable instead.
    "urllib3.connectionpool": ("Retrying (",),
}
# Loggers whose INFO lines are bookkeeping (table creation, monitors, font caches).
QUIET_LOGGERS = ("mlflow", "alembic", "matplotlib", "orbax", "jax._src", "tunix", "absl",
                 "huggingface_hub", "urllib3", "filelock")
# Python warnings with nothing to act on; matched as message prefixes.
NOISY_WARNINGS = (
    # MLflow 3.17 resolving a dataset source that two registered classes both claim.
    "The specified dataset source can be interpreted in multiple ways",
)


class _DropMatching(logging.Filter):
    def __init__(self, needles: tuple[str, ...]):
        super().__init__()
        self.needles = needles

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record is not ours to judge
            return True
        return not any(needle in message for needle in self.needles)


def quiet_third_party() -> None:
    """Drop known third-party noise; idempotent. A user's MLFLOW_LOGGING_LEVEL wins."""
    os.environ.setdefault("MLFLOW_LOGGING_LEVEL", "WARNING")  # read when mlflow is imported
    for name in QUIET_LOGGERS:
        logger = logging.getLogger(name)
        if logger.level in (logging.NOTSET, logging.DEBUG, logging.INFO):
            logger.setLevel(logging.WARNING)
    for name, needles in NOISE.items():
        logger = logging.getLogger(name)
        if not any(isinstance(f, _DropMatching) for f in logger.filters):
            logger.addFilter(_DropMatching(needles))
    for message in NOISY_WARNINGS:
        warnings.filterwarnings("ignore", message=message)


def before_after_table(before: dict[str, float], after: dict[str, float]) -> str:
    """Fixed-width table of the evaluation metrics before and after training."""
    lines = [f"{'':18}{'before':>9}{'after':>9}{'change':>9}"]
    for key, label in TABLE:
        if key in before and key in after:
            b, a = before[key], after[key]
            lines.append(f"{label:18}{b:9.3f}{a:9.3f}{a - b:+9.3f}")
    return "\n".join(lines)


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class ConsoleListener(Listener):
    def __init__(self, cfg: Config, stream: Any = None, terminal: bool | None = None,
                 link: Any = None):
        self.cfg = cfg
        # () -> the run's MLflow link (rlexp.tracking.links.run_dir_link), or None; printed
        # with the run dir once the tracker made the run (show_link) and at the end.
        self.link = link
        self.run_dir: Any = None
        self.stream = stream or sys.stderr
        # Bar on a terminal; plain step lines elsewhere; neither with run.progress=false.
        self.terminal = is_terminal(self.stream) if terminal is None else terminal
        self.bar: Any = None
        self.first_eval: dict[str, float] | None = None
        self.last_eval: dict[str, float] | None = None
        self.last_eval_step = 0
        self.accuracy: float | None = None
        self.total = cfg.train.steps
        self.start_step = 0
        self.every = max(1, cfg.train.steps // LINES_PER_RUN)
        self._last_line = time.monotonic()

    def on_run_start(self, info: RunInfo) -> None:
        self.run_dir = info.run_dir
        self.total, self.start_step = info.total_steps, info.start_step
        self.every = max(1, info.total_steps // LINES_PER_RUN)
        if not self.cfg.run.progress:
            return
        start = f" from step {info.start_step}" if info.start_step else ""
        # The first evaluation and step compile their programs (seconds to minutes).
        self._print(f"rlexp: training {info.total_steps} steps{start}; compiling the first "
                    "evaluation and step")
        if self.terminal:
            from tqdm import tqdm

            # The figures lead: a narrow terminal trims a line from its end (tqdm), so at
            # 80 columns the bar shrinks and the figures stay.
            self.bar = tqdm(total=info.total_steps, initial=info.start_step, file=self.stream,
                            desc=f"{info.start_step}/{info.total_steps}", leave=True,
                            bar_format="{desc} |{bar}| {elapsed}<{remaining}",
                            dynamic_ncols=True)

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)
        self._last_line = time.monotonic()

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        if not self.cfg.run.progress:
            return
        reward = metrics.get("train/reward_mean", float("nan"))
        step_s = metrics.get("time/step_s", float("nan"))
        # The accuracy is the last evaluation's, named by its step: acc@300.
        last = f"acc@{self.last_eval_step}" if self.accuracy is not None else ""
        if self.bar is not None:
            self.bar.n = step
            figures = f"{step}/{self.total} reward={reward:.3f} s/step={step_s:.2f}"
            if last:
                figures += f" {last}={self.accuracy:.3f}"
            self.bar.set_description_str(figures, refresh=True)
            return
        due = (step == self.start_step + 1 or step >= self.total or step % self.every == 0
               or time.monotonic() - self._last_line >= MAX_SILENCE_S)
        if due:
            acc = f"  {last} {self.accuracy:.3f}" if last else ""
            self._print(f"step {step}/{self.total}: reward {reward:.3f}  {step_s:.2f} s/step{acc}")

    def on_eval(self, step: int, metrics: dict[str, float], samples: list[dict]) -> None:
        if self.first_eval is None:
            self.first_eval = metrics
        self.last_eval, self.last_eval_step = metrics, step
        self.accuracy = metrics.get("eval/accuracy")
        line = (f"eval @ step {step}: accuracy {metrics.get('eval/accuracy', 0):.3f}  "
                f"format {metrics.get('eval/format_accuracy', 0):.3f}  "
                f"pass@{int(metrics.get('eval/k', 0))} {metrics.get('eval/pass_at_k', 0):.3f}")
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            self._print(line)

    def where(self) -> list[str]:
        """'run dir <path>' and 'MLflow <link>' lines (the latter when tracking is on)."""
        lines = [f"  run dir  {self.run_dir}"] if self.run_dir is not None else []
        link = self.link() if self.link is not None else None
        if link:
            lines.append(f"  MLflow   {link}")
        return lines

    def show_link(self) -> None:
        """Where the run is, once the listeners started (the tracker made its run)."""
        lines = self.where()
        if not lines:
            return
        text = "\n".join(lines)
        if self.bar is not None:
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)

    def on_run_end(self, status: str, summary: dict[str, Any]) -> None:
        if _job is not None:
            _job.status = status
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        before = summary.get("eval_before") or self.first_eval
        after = summary.get("eval_after")
        if after is None and status == "FINISHED":
            after = self.last_eval
        if before and after:
            print(before_after_table(before, after), file=self.stream)
        elif before and self.last_eval and self.last_eval_step > 0:
            # Stopped early: the latest evaluation is not "after training"; say when it was.
            print(before_after_table(before, self.last_eval).replace(
                "   after", "  latest", 1), file=self.stream)
        steps = summary.get("steps_done")
        if steps is None:
            steps = summary.get("resumed_from_step", "?")
        print(f"rlexp: {status.lower()} after {steps} steps"
              + (f" in {summary['wall_s']:.0f}s" if "wall_s" in summary else ""),
              file=self.stream, flush=True)
        for line in self.where():
            print(line, file=self.stream, flush=True)


# ------------------------------------------------------------ one stream, one format, phases


class ConsoleFormatter(logging.Formatter):
    """Log records on the console as rlexp's own lines are: 'rlexp: warm start: ...',
    'rlexp: warning: ...', 'absl: warning: ...' (who, the level unless INFO, the message),
    instead of Hydra's '[2026-11-24 11:16:23,641][rlexp.engine.warm_start][INFO] - ...'.
    The run's log file (rlexp.log) keeps Hydra's format, timestamps included."""

    def format(self, record: logging.LogRecord) -> str:
        who = "rlexp" if record.name.split(".")[0] in ("rlexp", "__main__") else record.name
        message = record.getMessage()
        if message.startswith(f"{who}: "):
            message = message[len(who) + 2:]
        level = "" if record.levelno <= logging.INFO else f"{record.levelname.lower()}: "
        text = f"{who}: {level}{message}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


# In a sweep, what each job would say about its own start-up (one warm-start line per job)
# stays in its rlexp.log: the sweep's progress says the rest. Warnings always show.
STARTUP_LOGGERS = ("rlexp.engine.warm_start", "rlexp.base.retention", "rlexp.inputs.model_files")


class _NotStartup(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return record.levelno >= logging.WARNING or not record.name.startswith(STARTUP_LOGGERS)


def _is_console_handler(handler: logging.Handler) -> bool:
    """Hydra's console handler (hydra/conf/hydra/job_logging/default.yaml): a plain
    StreamHandler (a FileHandler is a subclass, and stays as it is)."""
    return type(handler) is logging.StreamHandler


def route_logs(stream: Any, sweep: bool = False) -> list[tuple[logging.Handler, Any, Any]]:
    """The root logger's console handlers (Hydra's job logging writes to stdout) write to
    `stream` (stderr, where every rlexp line goes) in ConsoleFormatter's format; in a sweep
    the start-up lines are left to the job's log file. Returns what restore_logs undoes."""
    changed = []
    for handler in logging.getLogger().handlers:
        if not _is_console_handler(handler):
            continue
        changed.append((handler, handler.stream, handler.formatter))  # type: ignore[attr-defined]
        handler.setStream(stream)  # type: ignore[attr-defined]
        handler.setFormatter(ConsoleFormatter())
        for old in [f for f in handler.filters if isinstance(f, _NotStartup)]:
            handler.removeFilter(old)
        if sweep:
            handler.addFilter(_NotStartup())
    return changed


def restore_logs(changed: list[tuple[logging.Handler, Any, Any]]) -> None:
    for handler, stream, formatter in changed:
        handler.setStream(stream)  # type: ignore[attr-defined]
        handler.setFormatter(formatter)
        for old in [f for f in handler.filters if isinstance(f, _NotStartup)]:
            handler.removeFilter(old)


def phase(text: str) -> None:
    """A start-up phase begins ('rlexp: <run>: building the model ...'): one line at once on a
    terminal, for a single run. Piped output (a log, a test) is left as it was: one line per
    event, where a bad input the build finds stays its one error line; a sweep's job says
    nothing (the sweep's bar or lines do)."""
    if (_job is not None and _job.label is not None) or not is_terminal(sys.stderr):
        return
    if not runtime.is_main_process():  # a multi-controller run: process 0 alone prints
        return
    print(f"rlexp: {text}", file=sys.stderr, flush=True)


# ----------------------------------------------------------------- sweeps: one label per job

# What the launching process tells a sweep's jobs (rlexp.__main__ after pre-flight; the joblib
# launcher hands them to its workers, which may have started before): the number of jobs, the
# keys they vary, and, for the joblib launcher, the dir where each job writes its events
# (<job index>.jsonl: start, progress, end; its lines too on a terminal, which the launching
# process then prints above its sweep bar).
SWEEP_SIZE_ENV = "RLEXP_SWEEP_SIZE"
SWEEP_KEYS_ENV = "RLEXP_SWEEP_KEYS"
SWEEP_RELAY_ENV = "RLEXP_SWEEP_RELAY"
SWEEP_TERMINAL_ENV = "RLEXP_SWEEP_TERMINAL"

# Short names of the keys sweeps vary most ('[3/8 beta=0.04 G=4]'); any other key shows by
# its last part (train.warmup_steps -> warmup_steps), a group choice by its value (gspo).
SHORT_KEYS = {"algo.num_generations": "G", "algo.epsilon": "eps", "algo.epsilon_high": "eps_hi",
              "algo.num_iterations": "iters", "train.learning_rate": "lr",
              "train.batch_size": "B", "algo.kl_estimator": "kl"}


def short_value(value: str) -> str:
    """An override's value, short: 0.0437829 -> 0.0438, 0.0 -> 0; anything else as typed."""
    text = value.strip("'\"")
    if text.lstrip("+-").isdigit():
        return text
    try:
        return f"{float(text):.3g}"
    except ValueError:
        return text


def job_label(index: int, size: int | None, overrides: Sequence[str],
              keys: Sequence[str]) -> str:
    """'[3/8 beta=0.04 G=4]': the job's number (from 1) of the sweep's `size`, and its values
    of the swept `keys`, keys abbreviated (SHORT_KEYS)."""
    values = {}
    for override in overrides:
        key, sep, value = override.lstrip("+~").partition("=")
        if sep:
            values[key] = value
    items = []
    for key in keys:
        if key in values:
            value = short_value(values[key])
            items.append(value if "." not in key and "/" not in key
                          else f"{SHORT_KEYS.get(key, key.rsplit('.', 1)[-1])}={value}")
    head = f"{index + 1}/{size}" if size else str(index + 1)
    return f"[{' '.join([head, *items])}]"


@dataclass
class SweepEnv:
    # Jobs in the sweep (None: unknown).
    size: int | None = None
    # The keys the sweep varies, for the labels.
    keys: list[str] = field(default_factory=list)
    # The joblib launcher's event dir (None: another launcher).
    relay: Path | None = None
    # The launching process draws a bar on a terminal: jobs send it their lines.
    terminal: bool = False

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
        with self._lock:
            try:
                with open(self.path, "a", encoding="utf-8") as handle:
                    handle.write(line)
            except OSError:  # the sweep's display is a nicety: never fail a job for it
                pass


class LabelledStream(io.TextIOBase):
    """sys.stdout/sys.stderr of a sweep's job: every line it is given goes out with the job's
    label in front, whole (one write: lines of jobs running side by side never mix), to
    `write_line`."""

    def __init__(self, label: str, write_line: Callable[[str], None]):
        super().__init__()
        self.label = label
        self.write_line = write_line
        self._partial = ""
        self._lock = threading.Lock()

    def write(self, text: str) -> int:
        with self._lock:
            lines = (self._partial + text).split("\n")
            self._partial = lines.pop()
        for line in lines:
            line = line.rsplit("\r", 1)[-1]  # a redraw: the last state only
            self.write_line(f"{self.label} {line}" if line.strip() else line)
        return len(text)

    def flush(self) -> None:
        pass  # a partial line waits for its end (end_line at the job's end)

    def end_line(self) -> None:
        if self._partial:
            self.write("\n")

    def isatty(self) -> bool:
        return False

    def writable(self) -> bool:
        return True


def _line_writer(stream: Any) -> Callable[[str], None]:
    def write_line(line: str) -> None:
        stream.write(line + "\n")
        stream.flush()
    return write_line


class JobOutput:
    """What this process's current job prints through: its label in a sweep (None for a
    single run), the relay to the launching process, the status its console saw."""

    def __init__(self, label: str | None, relay: Relay | None):
        self.label = label
        self.relay = relay
        self.status: str | None = None


_job: JobOutput | None = None


@contextlib.contextmanager
def job_output(index: int | None, overrides: Sequence[str],
               environ: Mapping[str, str] = os.environ) -> Iterator[JobOutput]:
    """A job's console: log records on stderr in ConsoleFormatter's format, and, in a sweep
    (`index` is its number), every line it prints labelled (job_label). Under the joblib
    launcher its start and end (and progress) go to the launching process; on a terminal its
    lines too, which that process prints above its sweep bar."""
    global _job
    sweep = SweepEnv.from_env(environ) if index is not None else None
    relay = None
    if sweep is not None and sweep.relay is not None:
        relay = Relay(sweep.relay / f"{index}.jsonl")
    label = job_label(index, sweep.size, overrides, sweep.keys) if sweep is not None else None
    out = JobOutput(label, relay)
    streams = sys.stdout, sys.stderr
    if label is not None:
        if relay is not None and sweep is not None and sweep.terminal:
            def to_relay(line: str) -> None:
                relay.send(kind="line", text=line)
            sys.stdout = LabelledStream(label, to_relay)
            sys.stderr = LabelledStream(label, to_relay)
        else:
            sys.stdout = LabelledStream(label, _line_writer(streams[0]))
            sys.stderr = LabelledStream(label, _line_writer(streams[1]))
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
            status = out.status or ("FAILED" if failed else "FINISHED")
            relay.send(kind="end", status=status)
