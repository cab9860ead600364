"""Console listener: a progress bar (step, reward, accuracy, s/step) and a before -> after
table at the end of the run."""

from __future__ import annotations

import sys
from typing import Any

from rlexp.config import Config
from rlexp.events import Listener, RunInfo

# Rows of the end-of-run table: (metric, label).
TABLE = (("eval/accuracy", "accuracy"), ("eval/partial_accuracy", "partial accuracy"),
         ("eval/format_accuracy", "format accuracy"), ("eval/pass_at_k", "pass@k"),
         ("eval/mean_reward", "mean reward"))


def before_after_table(before: dict[str, float], after: dict[str, float]) -> str:
    """Fixed-width table of the evaluation metrics before and after training."""
    lines = [f"{'':18}{'before':>9}{'after':>9}{'change':>9}"]
    for key, label in TABLE:
        if key in before and key in after:
            b, a = before[key], after[key]
            lines.append(f"{label:18}{b:9.3f}{a:9.3f}{a - b:+9.3f}")
    return "\n".join(lines)


class ConsoleListener(Listener):
    def __init__(self, cfg: Config, stream: Any = None):
        self.cfg = cfg
        self.stream = stream or sys.stderr
        self.bar: Any = None
        self.first_eval: dict[str, float] | None = None
        self.last_eval: dict[str, float] | None = None
        self.accuracy: float | None = None

    def on_run_start(self, info: RunInfo) -> None:
        from tqdm import tqdm

        self.bar = tqdm(total=info.total_steps, initial=info.start_step, desc=info.name,
                        file=self.stream, dynamic_ncols=True, leave=True)

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        if self.bar is None:
            return
        self.bar.n = step
        post = {"reward": f"{metrics.get('train/reward_mean', float('nan')):.3f}",
                "s/step": f"{metrics.get('time/step_s', float('nan')):.2f}"}
        if self.accuracy is not None:
            post["acc"] = f"{self.accuracy:.3f}"
        self.bar.set_postfix(post, refresh=True)

    def on_eval(self, step: int, metrics: dict[str, float], samples: list[dict]) -> None:
        if self.first_eval is None:
            self.first_eval = metrics
        self.last_eval = metrics
        self.accuracy = metrics.get("eval/accuracy")
        line = (f"eval @ step {step}: accuracy {metrics.get('eval/accuracy', 0):.3f}  "
                f"format {metrics.get('eval/format_accuracy', 0):.3f}  "
                f"pass@{int(metrics.get('eval/k', 0))} {metrics.get('eval/pass_at_k', 0):.3f}")
        if self.bar is not None:
            self.bar.write(line, file=self.stream)
        else:
            print(line, file=self.stream)

    def on_run_end(self, status: str, summary: dict[str, Any]) -> None:
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        before = summary.get("eval_before") or self.first_eval
        after = summary.get("eval_after") or self.last_eval
        if before and after:
            print(before_after_table(before, after), file=self.stream)
        print(f"rlexp: {status.lower()} after {summary.get('steps_done', '?')} steps"
              + (f" in {summary['wall_s']:.0f}s" if "wall_s" in summary else ""), file=self.stream)
