"""What a run prints: progress (a bar on a terminal; elsewhere periodic lines, where a bar's
carriage returns would pile up), evaluation lines and a before -> after table at the end. All of
it, log records too (route_logs), goes to stderr as 'rlexp: ...' or 'rlexp: warning: ...'; a
sweep's job writes through a LabelledStream, its label on every line."""

from __future__ import annotations

import io
import logging
import os
import sys
import threading
import time
import warnings
from typing import Any, Callable

from rlexp.base import runtime
from rlexp.base.events import Listener, RunInfo
from rlexp.config.schema import Config

# Rows of the end-of-run table: (metric, label).
TABLE = (("eval/accuracy", "accuracy"), ("eval/partial_accuracy", "partial accuracy"),
         ("eval/format_accuracy", "format accuracy"), ("eval/pass_at_k", "pass@k"),
         ("eval/mean_reward", "mean reward"))
# Without a terminal: about this many step lines per run, and at least one per interval.
LINES_PER_RUN = 20
MAX_SILENCE_S = 60.0

# Third-party log noise (substrings): Tunix's absl warnings on CPU, huggingface_hub's retries.
NOISE = {
    "absl": ("Resharding model from", "Skipping non-TPU device"),
    "huggingface_hub": ("thrown while requesting", "Returning existing local_dir"),
    "huggingface_hub.utils._http": ("thrown while requesting",),
    # MLflow's urllib3 retries: ~20 warnings in a 2-step run; rlexp says it once instead.
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
    # Tunix's reward_manager.py nanmean of all-NaN rewards; the loop's NaN guard says it instead.
    warnings.filterwarnings("ignore", message="Mean of empty slice", category=RuntimeWarning,
                            module=r"tunix\.")


def before_after_table(before: dict[str, float], after: dict[str, float]) -> str:
    lines = [f"{'':18}{'before':>9}{'after':>9}{'change':>9}"]
    for key, label in TABLE:
        if key in before and key in after:
            b, a = before[key], after[key]
            if key == "eval/pass_at_k":  # 'pass@4', as the eval lines say
                from rlexp.job.evaluate import pass_at_k_label
                label = pass_at_k_label(after)
            lines.append(f"{label:18}{b:9.3f}{a:9.3f}{a - b:+9.3f}")
    return "\n".join(lines)


class LabelledStream(io.TextIOBase):
    """sys.stdout/sys.stderr of a sweep's job: each line goes to `write_line` whole, the job's
    label in front (one write: lines of jobs running side by side never mix)."""

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

    def writable(self) -> bool:
        return True


def is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


class ConsoleListener(Listener):
    def __init__(self, cfg: Config, stream: Any = None, terminal: bool | None = None,
                 link: Any = None):
        self.cfg = cfg
        self.link = link  # () -> the run's MLflow link or None (show_link prints it)
        self.run_dir: Any = None
        self.stream = stream or sys.stderr
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
            # Figures lead: tqdm trims a narrow terminal's line from its end, the bar shrinks.
            self.bar = tqdm(total=info.total_steps, initial=info.start_step, file=self.stream,
                            desc=f"{info.start_step}/{info.total_steps}", leave=True,
                            bar_format="{desc} |{bar}| {elapsed}<{remaining}", dynamic_ncols=True)

    def _print(self, text: str) -> None:
        if self.bar is not None:  # above the bar
            self.bar.write(text, file=self.stream)
        else:
            print(text, file=self.stream, flush=True)
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
        if (step == self.start_step + 1 or step >= self.total or step % self.every == 0
                or time.monotonic() - self._last_line >= MAX_SILENCE_S):
            acc = f"  {last} {self.accuracy:.3f}" if last else ""
            self._print(f"step {step}/{self.total}: reward {reward:.3f}  {step_s:.2f} s/step{acc}")

    def on_eval(self, step: int, metrics: dict[str, float], samples: list[dict]) -> None:
        if self.first_eval is None:
            self.first_eval = metrics
        self.last_eval, self.last_eval_step = metrics, step
        self.accuracy = metrics.get("eval/accuracy")
        from rlexp.job.evaluate import pass_at_k_label
        self._print(f"eval @ step {step}: accuracy {metrics.get('eval/accuracy', 0):.3f}  "
                    f"format {metrics.get('eval/format_accuracy', 0):.3f}  "
                    f"{pass_at_k_label(metrics)} {metrics.get('eval/pass_at_k', 0):.3f}")

    def show_link(self) -> None:
        """'run dir' and 'MLflow' lines, once the tracker made its run and at the end."""
        lines = [f"  run dir  {self.run_dir}"] if self.run_dir is not None else []
        link = self.link() if self.link is not None else None
        if link:
            lines.append(f"  MLflow   {link}")
        if lines:
            self._print("\n".join(lines))

    def on_run_end(self, status: str, summary: dict[str, Any]) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        before = summary.get("eval_before") or self.first_eval
        after = summary.get("eval_after")
        if after is None and status == "FINISHED":
            after = self.last_eval
        failed = status == "FAILED" and summary.get("error")  # the line says why, not the table
        table = None
        if before and after and not failed:
            table = before_after_table(before, after)
        elif before and self.last_eval and self.last_eval_step > 0 and not failed:
            # Stopped early: the latest evaluation is not "after training"; say when it was.
            table = before_after_table(before, self.last_eval).replace("   after", "  latest", 1)
        if table and isinstance(self.stream, LabelledStream):
            logging.getLogger(JOB_LOG_ONLY).info("evaluation before and after training\n%s", table)
        elif table:
            print(table, file=self.stream)
        steps = summary.get("steps_done")
        if steps is None:
            steps = summary.get("resumed_from_step", "?")
        if failed:  # the run's one error line (the rest is in rlexp.log)
            self._print(f"rlexp: error: {summary['error']}")
        else:
            took = f" in {summary['wall_s']:.0f}s" if "wall_s" in summary else ""
            self._print(f"rlexp: {status.lower()} after {steps} steps{took}")
        self.show_link()


class ConsoleFormatter(logging.Formatter):
    """Log records on the console as rlexp's own lines: 'rlexp: warning: ...', 'absl:
    warning: ...' (who, the level unless INFO, the message); rlexp.log keeps Hydra's format."""

    def format(self, record: logging.LogRecord) -> str:
        who = "rlexp" if record.name.split(".")[0] in ("rlexp", "__main__") else record.name
        message = record.getMessage().removeprefix(f"{who}: ")
        level = "" if record.levelno <= logging.INFO else f"{record.levelname.lower()}: "
        text = f"{who}: {level}{message}"
        if record.exc_info:
            text += "\n" + self.formatException(record.exc_info)
        return text


# Records for rlexp.log alone: a failure's traceback (its one line is the console's).
FILE_ONLY = "rlexp.job.file_only"
# In a sweep, each job's before/after table stays in its rlexp.log: the sweep ends with one group
# table. Its start-up phases (reading the weights, the warm start and its progress) show,
# labelled: they fill a first minute the sweep's bar alone would leave at "0/6 done".
JOB_LOG_ONLY = "rlexp.job.log_only"


def _not_log_only(record: logging.LogRecord) -> bool:
    return record.name != JOB_LOG_ONLY


def _console(record: logging.LogRecord) -> bool:
    """No FILE_ONLY record; below WARNING, process 0's only (read per record: the index is
    known once jax.distributed has joined)."""
    if record.name == FILE_ONLY:
        return False
    return record.levelno >= logging.WARNING or runtime.is_main_process()


# Filters on the console handlers (logging takes a plain function as a filter).
_OURS = (_not_log_only, _console)


def route_logs(stream: Any, sweep: bool = False) -> list[tuple[logging.Handler, Any, Any]]:
    """The root logger's console handlers (Hydra's write to stdout) write to `stream` in
    ConsoleFormatter's format; returns what restore_logs undoes."""
    changed = []
    for handler in logging.getLogger().handlers:
        # Hydra's console handler is a plain StreamHandler; a FileHandler (subclass) stays.
        if type(handler) is not logging.StreamHandler:
            continue
        changed.append((handler, handler.stream, handler.formatter))  # type: ignore[attr-defined]
        handler.setStream(stream)  # type: ignore[attr-defined]
        handler.setFormatter(ConsoleFormatter())
        for old in _OURS:
            handler.removeFilter(old)
        handler.addFilter(_console)
        if sweep:
            handler.addFilter(_not_log_only)
    return changed


def restore_logs(changed: list[tuple[logging.Handler, Any, Any]]) -> None:
    for handler, stream, formatter in changed:
        handler.setStream(stream)  # type: ignore[attr-defined]
        handler.setFormatter(formatter)
        for old in _OURS:
            handler.removeFilter(old)


def phase(text: str) -> None:
    """A start-up phase begins: one line from process 0 on a terminal (piped output keeps a bad
    input's one error line), or in a sweep's job, labelled (pre-flight refused bad input)."""
    shown = is_terminal(sys.stderr) or isinstance(sys.stderr, LabelledStream)
    if shown and runtime.is_main_process():
        print(f"rlexp: {text}", file=sys.stderr, flush=True)
