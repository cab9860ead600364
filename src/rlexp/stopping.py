"""Stopping a run before train.steps: early stopping on a stalled metric, pruning of sweep jobs.

Both are `Stop` objects the loop asks after each logged step and each evaluation; the first
one that answers with a reason ends the training loop (the final evaluation and checkpoint
still run, the run ends FINISHED, and summary.json / MLflow carry the reason).

Pruning a sweep's jobs: hydra-optuna-sweeper 1.3.0 asks its study for a batch of trials,
launches the jobs and only `tell`s the study their return values (its `_impl.py` sweep());
no job ever sees its Optuna trial, so Optuna cannot prune through the sweeper. Instead each
job of a sweep opens a second, shared study in the sweep dir (`pruning.db`, sqlite), takes a
trial of its own there, reports its eval curve with `trial.report(value, step)` and stops
when `trial.should_prune()`: Optuna's MedianPruner then compares the job with the jobs that
ran before it at the same step. This works with every sweeper (basic grid or Optuna) and
every launcher whose jobs share the sweep dir. A pruned job still returns its final eval
accuracy to the sweeper, so the sweeper's study records it as a (poor) complete trial.
"""

from __future__ import annotations

import math
import sys
from pathlib import Path
from typing import Any, Protocol

from rlexp.config import EarlyStopConfig, PruneConfig

PRUNING_DB = "pruning.db"
PRUNING_STUDY = "rlexp-pruning"


class Stop(Protocol):
    def check(self, step: int, metrics: dict[str, float]) -> str | None:
        """A one-line reason to stop now, or None."""

    def finish(self, status: str, summary: dict[str, Any]) -> None:
        """The run ended (FINISHED, FAILED, KILLED); summary.json's fields."""


def improved(value: float, best: float | None, mode: str, min_delta: float) -> bool:
    """value beats best by more than min_delta in the direction of `mode` (max|min)."""
    if best is None:
        return True
    return value > best + min_delta if mode == "max" else value < best - min_delta


class EarlyStop:
    """Stop after `patience` checks of `metric` without an improvement of min_delta over the
    best value seen (Keras/Lightning EarlyStopping semantics). A NaN never counts as one."""

    def __init__(self, cfg: EarlyStopConfig):
        self.cfg = cfg
        self.best: float | None = None
        self.best_step = 0
        self.stale = 0

    def check(self, step: int, metrics: dict[str, float]) -> str | None:
        c = self.cfg
        if c.metric is None or c.metric not in metrics:
            return None
        value = float(metrics[c.metric])
        if math.isfinite(value) and improved(value, self.best, c.mode, c.min_delta):
            self.best, self.best_step, self.stale = value, step, 0
            return None
        self.stale += 1
        if self.stale < c.patience:
            return None
        return (f"early_stop: {c.metric} did not improve on {self.best:g} (step "
                f"{self.best_step}) by more than {c.min_delta:g} in {c.patience} checks")

    def finish(self, status: str, summary: dict[str, Any]) -> None:
        pass


class SweepPruner:
    """This job's trial in the sweep's shared pruning study (see the module docstring)."""

    def __init__(self, cfg: PruneConfig, sweep_dir: Path, job_name: str):
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.cfg = cfg
        storage = optuna.storages.RDBStorage(
            f"sqlite:///{Path(sweep_dir).resolve() / PRUNING_DB}",
            engine_kwargs={"connect_args": {"timeout": 30}})
        self.study = optuna.create_study(
            study_name=PRUNING_STUDY, storage=storage, load_if_exists=True,
            direction="maximize" if cfg.mode == "max" else "minimize",
            pruner=optuna.pruners.MedianPruner(n_startup_trials=cfg.startup_jobs,
                                               n_warmup_steps=cfg.warmup_steps))
        self.trial = self.study.ask()
        self.trial.set_user_attr("job", job_name)
        self.last: float | None = None
        self.pruned = False

    def check(self, step: int, metrics: dict[str, float]) -> str | None:
        if step <= 0 or self.cfg.metric not in metrics:  # before training: all jobs alike
            return None
        value = float(metrics[self.cfg.metric])
        if not math.isfinite(value):
            return None
        self.trial.report(value, step)
        self.last = value
        if not self.trial.should_prune():
            return None
        self.pruned = True
        return (f"pruned: {self.cfg.metric}={value:g} at step {step} trails the median of "
                f"the sweep's earlier jobs (Optuna MedianPruner, trial {self.trial.number})")

    def finish(self, status: str, summary: dict[str, Any]) -> None:
        import optuna

        State = optuna.trial.TrialState
        final = (summary.get("eval_after") or {}).get(self.cfg.metric, self.last)
        if self.pruned:
            self.study.tell(self.trial, state=State.PRUNED)
        elif status == "FINISHED" and final is not None and math.isfinite(float(final)):
            self.study.tell(self.trial, float(final))
        else:
            self.study.tell(self.trial, state=State.FAIL)


class Stops:
    """The run's stop conditions, asked in order; never fatal for a pruner's storage."""

    def __init__(self, stops: list[Stop]):
        self.stops = stops

    def check(self, step: int, metrics: dict[str, float]) -> str | None:
        for stop in self.stops:
            reason = stop.check(step, metrics)
            if reason:
                return reason
        return None

    def finish(self, status: str, summary: dict[str, Any]) -> None:
        for stop in self.stops:
            try:
                stop.finish(status, summary)
            except Exception as exc:  # the run's result is written already
                print(f"rlexp: warning: {type(stop).__name__}: {exc}", file=sys.stderr)


def build(train_early_stop: EarlyStopConfig, train_prune: PruneConfig,
          sweep_dir: Path | None, job_name: str) -> Stops:
    stops: list[Stop] = []
    if train_early_stop.metric is not None:
        stops.append(EarlyStop(train_early_stop))
    if train_prune.pruner != "none":
        if sweep_dir is None:
            print("rlexp: note: train.prune acts on the jobs of a sweep (-m); this single run "
                  "is not pruned", file=sys.stderr)
        else:
            stops.append(SweepPruner(train_prune, sweep_dir, job_name))
    return Stops(stops)
