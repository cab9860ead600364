"""A scripted engine for tests of the loop's control flow (stopping, profiles, tracking).

It has the surface the loop, the checkpointer and the run's listeners use (rlexp.engine's
Engine), but no model: train_step returns metrics of a script, and `evaluate` (patched in for
rlexp.job.evaluate.evaluate) returns the eval accuracy the script gives for a step. What the
tests assert on is what rlexp does with these numbers, never the numbers themselves.
Also loaded in sweep jobs through sitecustomize (install()), with the curve picked by the
job's learning rate, so a real Hydra sweep runs in seconds.
"""

from __future__ import annotations

import json
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import numpy as np

from rlexp.data import Example, Splits  # the real data types: only the model is scripted


class JsonStore:
    """Checkpoint store of metadata only (the checkpointer's save/steps/restore/resume)."""

    def __init__(self, directory: str, keep: int):
        self.dir = Path(directory)

    def save(self, step: int, meta: dict) -> None:
        (self.dir / str(step)).mkdir(parents=True, exist_ok=True)
        (self.dir / str(step) / "meta.json").write_text(json.dumps(meta, default=str))

    def steps(self) -> list[int]:
        return sorted((int(p.name) for p in self.dir.glob("*") if p.name.isdigit()), reverse=True)

    def restore(self, step: int) -> dict:
        return json.loads((self.dir / str(step) / "meta.json").read_text())

    def resume(self, meta: dict) -> None:
        pass

    def close(self) -> None:
        pass


@dataclass
class FakeEngine:
    cfg: Any
    # eval accuracy at a global step
    curve: Callable[[int], float]
    # metrics of training step k (1-based)
    train: Callable[[int], dict] = lambda k: {"train/reward_mean": 1.0, "train/loss": 0.5}
    start_step: int = 0
    updates_per_step: int = 1
    rollout_batch: int = 8
    info: dict = field(default_factory=dict)
    step_fn: Callable[[], None] = lambda: None

    def __post_init__(self) -> None:
        rows = [Example(f"{i}+1=", str(i + 1), f"<answer>{i + 1}</answer>", f"{i}+1")
                for i in range(8)]
        self.splits = Splits(rows, rows[:4], skipped=0, truncated=0)
        self.done = 0

    def schedule(self, count: int) -> float:
        return 1e-3

    def train_step(self, batch: Any, key: Any, ahead: Any = ()) -> dict:
        self.step_fn()
        self.done += 1
        return {"train/completion_length": 4.0, **self.train(self.done + self.start_step)}

    def rollouts(self) -> list[dict]:
        """The latest step's completions (two, with rewards that sum to their total)."""
        step = self.done + self.start_step
        return [{"prompt": f"{step}+1=", "completion": f"<answer>{step + 1}</answer>",
                 "format_exact": 0.5, "answer_exact": 1.0, "reward": 1.5, "advantage": 0.7071,
                 "length": 6, "truncated": False},
                {"prompt": f"{step}+1=", "completion": "no", "format_exact": 0.0,
                 "answer_exact": 0.0, "reward": 0.0, "advantage": -0.7071, "length": 2,
                 "truncated": False}]

    def checkpoint_store(self, directory: str, keep: int) -> JsonStore:
        return JsonStore(directory, keep)

    def current_step(self) -> int:
        return self.start_step + self.done


def evaluate(engine: FakeEngine, key: Any) -> tuple[dict, list]:
    step = engine.current_step()
    acc = float(engine.curve(step))
    return ({"eval/accuracy": acc, "eval/k": 2.0},
            [{"question": "1+1", "completion": "<answer>2</answer>", "reward": acc}])


# --------------------------------------------------------------------------- sweep jobs

SITECUSTOMIZE = '''
import os
if os.environ.get("RLEXP_FAKE_ENGINE"):
    import sys
    sys.path.insert(0, os.environ["RLEXP_FAKE_ENGINE"])
    import fake_engine
    fake_engine.install()
'''


def install() -> None:
    """Replace engine building and evaluation in this process (a sweep job's)."""
    import rlexp.engine
    import rlexp.job.evaluate

    def build(cfg: Any, plan: Any, run_dir: Path) -> FakeEngine:
        time.sleep(float(os.environ.get("RLEXP_FAKE_BUILD_S", "0")))  # a warm start, a compile
        # the curve is set by the learning rate: lr >= 1e-3 learns (0.1/step), lower stalls
        good = cfg.train.learning_rate >= 1e-3
        return FakeEngine(cfg, curve=lambda s: (0.2 + 0.1 * s) if good else 0.05)

    rlexp.engine.build = build
    rlexp.job.evaluate.evaluate = evaluate


def sweep_env(root: Path) -> dict[str, str]:
    site = root / "fake_site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": f"{site}{os.pathsep}{path}" if path else str(site),
            "RLEXP_FAKE_ENGINE": str(Path(__file__).resolve().parent)}
