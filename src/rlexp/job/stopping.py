"""Stopping a run before train.steps: early stopping on a stalled metric, pruning of sweep jobs.
The loop asks each `Stop` after each logged step and evaluation; the first reason ends training
(the final evaluation and checkpoint still run, the run ends FINISHED with the reason).

Pruning: hydra-optuna-sweeper 1.3.0 only `tell`s its study the jobs' return values (`_impl.py`
sweep()), so no job sees its trial. Instead each finished or pruned job appends its eval curve
to the sweep dir's pruning.jsonl; a job loads those into an in-memory study as earlier trials
and stops when Optuna's MedianPruner says so. (Optuna 2.10's RDB storage fails its alembic
check with SQLAlchemy 2, which MLflow needs: no shared sqlite study.) Any sweeper, any launcher
whose jobs share the sweep dir; a pruned job still returns its final eval accuracy."""

from __future__ import annotations

import json
import math
import os
import sys
import warnings
from pathlib import Path
from typing import Any, Protocol

from rlexp.base.lock import flocked
from rlexp.config.schema import EarlyStopConfig, PruneConfig

# optuna (5.5 s, optional: rlexp[optuna]) is imported only when a sweep job prunes.

# One JSON line per finished or pruned job of the sweep: its state, final value and curve.
PRUNING_FILE = "pruning.jsonl"


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
    """Keras/Lightning EarlyStopping on `metric`; a NaN never counts as an improvement."""

    def __init__(self, cfg: EarlyStopConfig):
        self.cfg = cfg
        self.best: float | None = None
        self.best_step = 0
        self.stale = 0

    def check(self, step: int, metrics: dict[str, float]) -> str | None:
        c = self.cfg
        if c.metric not in metrics:  # (None: off)
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
    """This job's trial in the sweep's pruning study (see the module docstring)."""

    def __init__(self, cfg: PruneConfig, sweep_dir: Path, job_name: str):
        import optuna
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        self.cfg = cfg
        self.job = job_name
        self.path = Path(sweep_dir) / PRUNING_FILE
        self.study = optuna.create_study(
            direction="maximize" if cfg.mode == "max" else "minimize",
            pruner=optuna.pruners.MedianPruner(n_startup_trials=cfg.startup_jobs,
                                               n_warmup_steps=cfg.warmup_steps))
        with warnings.catch_warnings():  # add_trial is "experimental" in Optuna 2.x
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            for job in read_jobs(self.path):  # the sweep's earlier jobs, as Optuna trials
                self.study.add_trial(optuna.trial.create_trial(
                    state=getattr(optuna.trial.TrialState, job["state"]), value=job.get("value"),
                    intermediate_values={int(k): v for k, v in job["curve"].items()},
                    user_attrs={"job": job["job"]}))
        self.trial = self.study.ask()
        self.curve: dict[int, float] = {}
        self.pruned = False

    def check(self, step: int, metrics: dict[str, float]) -> str | None:
        if step <= 0 or self.cfg.metric not in metrics:  # before training: all jobs alike
            return None
        value = float(metrics[self.cfg.metric])
        if not math.isfinite(value):
            return None
        self.trial.report(value, step)
        self.curve[step] = value
        if not self.trial.should_prune():
            return None
        self.pruned = True
        return (f"pruned: {self.cfg.metric}={value:g} at step {step} trails the median of the "
                f"sweep's earlier jobs (Optuna MedianPruner over {PRUNING_FILE})")

    def finish(self, status: str, summary: dict[str, Any]) -> None:
        """Append this job to the sweep's pruning record (jobs after it compare with it)."""
        final = (summary.get("eval_after") or {}).get(self.cfg.metric)
        if self.pruned:
            state, value = "PRUNED", None
        elif status == "FINISHED" and final is not None and math.isfinite(float(final)):
            state, value = "COMPLETE", float(final)
        else:
            return  # failed or killed: a rerun resumes it, it is no evidence for others
        record = {"job": self.job, "state": state, "value": value,
                  "curve": {str(k): v for k, v in self.curve.items()}}
        with flocked(self.path) as handle:  # an exclusive lock: jobs may end at the same time
            handle.write(json.dumps(record) + "\n")
            handle.flush()
            os.fsync(handle.fileno())


def read_jobs(path: Path) -> list[dict]:
    """Jobs recorded in a sweep's pruning.jsonl (a torn last line is skipped)."""
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return []
    out = []
    for line in lines:
        try:
            job = json.loads(line)
        except ValueError:
            continue
        if isinstance(job, dict) and job.get("state") in ("COMPLETE", "PRUNED"):
            out.append(job)
    return out


class Stops:
    """The run's stop conditions, asked in order; never fatal for a pruner's storage."""

    def __init__(self, stops: list[Stop]):
        self.stops = stops

    def check(self, step: int, metrics: dict[str, float]) -> str | None:
        reasons = (stop.check(step, metrics) for stop in self.stops)  # asked until one answers
        return next((reason for reason in reasons if reason), None)

    def finish(self, status: str, summary: dict[str, Any]) -> None:
        for stop in self.stops:
            try:
                stop.finish(status, summary)
            except Exception as exc:  # the run's result is written already
                print(f"rlexp: warning: {type(stop).__name__}: {exc}", file=sys.stderr)


def make_stops(train_early_stop: EarlyStopConfig, train_prune: PruneConfig,
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
