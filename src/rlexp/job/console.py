"""What a run prints: progress, evaluation lines and a before -> after table at the end.

On a terminal the progress is a bar (step, reward, accuracy, s/step). When stdout/stderr is
not a terminal (a file, a pipe, a scheduler's log) a bar's carriage returns pile up into one
huge line, so progress becomes plain periodic lines instead, one per event. run.progress=false
hides the bar and the step lines only: evaluation lines and the final table stay.

`quiet_third_party()` removes lines that tell a user nothing they can act on (absl's
resharding notes, MLflow's table creation and system-metrics chatter, Hugging Face's offline
retries, urllib3's retries against a store that is down); warnings and errors of those
libraries still show.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import warnings
from typing import Any

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
    def __init__(self, cfg: Config, stream: Any = None, terminal: bool | None = None):
        self.cfg = cfg
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
        self.total, self.start_step = info.total_steps, info.start_step
        self.every = max(1, info.total_steps // LINES_PER_RUN)
        if not self.cfg.run.progress:
            return
        if self.terminal:
            from tqdm import tqdm

            self.bar = tqdm(total=info.total_steps, initial=info.start_step, desc=info.name,
                            file=self.stream, dynamic_ncols=True, leave=True)
        else:
            start = f" from step {info.start_step}" if info.start_step else ""
            self._print(f"{info.name}: {info.total_steps} steps{start}")

    def _print(self, line: str) -> None:
        print(line, file=self.stream, flush=True)
        self._last_line = time.monotonic()

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        if not self.cfg.run.progress:
            return
        reward = metrics.get("train/reward_mean", float("nan"))
        step_s = metrics.get("time/step_s", float("nan"))
        if self.bar is not None:
            self.bar.n = step
            post = {"reward": f"{reward:.3f}", "s/step": f"{step_s:.2f}"}
            if self.accuracy is not None:
                post["acc"] = f"{self.accuracy:.3f}"
            self.bar.set_postfix(post, refresh=True)
            return
        due = (step == self.start_step + 1 or step >= self.total or step % self.every == 0
               or time.monotonic() - self._last_line >= MAX_SILENCE_S)
        if due:
            acc = f"  acc {self.accuracy:.3f}" if self.accuracy is not None else ""
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

    def on_run_end(self, status: str, summary: dict[str, Any]) -> None:
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
