"""The training loop: a flat sequence of named, timed phases.

    evaluate (before) -> for each step: data, step (rollout, reward, advantage and update
    inside Tunix's learner), check, log, [evaluate], [checkpoint], [stop?] -> evaluate (after),
    checkpoint

All state lives in `LoopState`: the global step. The data order and every sampling key are
pure functions of (seed, step), so a checkpoint needs the step, the weights and the
optimizer state, and nothing else. A checkpoint at step s is taken after step s's metrics
and evaluation were emitted, so a resume from s repeats none of them.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterator

from rlexp.base.events import Listeners
from rlexp.config.schema import Config
from rlexp.engine import eval_key, rollout_key
from rlexp.engine.profile import StepProfiler
from rlexp.job import guards
from rlexp.job.evaluate import evaluate
from rlexp.job.resume import Preempted
from rlexp.planning.hardware import any_process
from rlexp.planning.perf import peak_tflops, step_flops, utilization

if TYPE_CHECKING:
    from rlexp.job.resume import Checkpointer, StopFlag
    from rlexp.engine import Engine
    from rlexp.job.stopping import Stops

log = logging.getLogger("rlexp")


@dataclass
class LoopState:
    # rlexp's global step: optimizer-step batches done; step k's metrics are the k-th update's.
    step: int
    # Root seed: data order = f(seed, step), sampling key = g(seed, step).
    seed: int
    # Metrics of the evaluation before training.
    eval_before: dict[str, float] = field(default_factory=dict)
    # Metrics of the latest evaluation.
    eval_last: dict[str, float] = field(default_factory=dict)
    # Metrics of the latest training step.
    train_last: dict[str, float] = field(default_factory=dict)


class PhaseTimer:
    """Seconds per named phase, cumulative and of the latest occurrence."""

    def __init__(self) -> None:
        self.total: dict[str, float] = {}
        self.last: dict[str, float] = {}
        self.since: dict[str, float] = {}
        # The innermost phase an exception left (None: none did).
        self.failed: str | None = None

    @contextmanager
    def __call__(self, name: str) -> Iterator[None]:
        started = time.perf_counter()
        try:
            yield
        except BaseException:
            self.failed = self.failed or name
            raise
        finally:
            took = time.perf_counter() - started
            self.last[name] = took
            self.total[name] = self.total.get(name, 0.0) + took
            self.since[name] = self.since.get(name, 0.0) + took

    def take(self) -> dict[str, float]:
        """Seconds per phase since the previous take (a step's metrics carry them)."""
        out, self.since = self.since, {}
        return out


class NonFinite(Exception):
    """A loss or reward became NaN/Inf: the run stops (what checkpoint is kept is the
    caller's to say: it knows what is on disk)."""


def check_finite(step: int, metrics: dict[str, float]) -> None:
    bad = guards.nonfinite(metrics)
    if bad:
        raise NonFinite(f"step {step}: {', '.join(f'{k}={metrics[k]}' for k in bad)}; stopped")


# What each phase is called in an error line ("... in the evaluation at step 0").
_PHASE_NAMES = {"data": "the data of", "step": "", "evaluate": "the evaluation at",
                "checkpoint": "the checkpoint of", "log": "the logging of"}


def failed_at(exc: BaseException) -> str | None:
    """Where in the loop `exc` was raised ('at step 3', 'in the evaluation at step 0'), as
    run() noted it; None when it did not come from the loop."""
    return getattr(exc, "_rlexp_failed_at", None)


def _note_where(exc: BaseException, phase: "PhaseTimer", step: int) -> None:
    # data and step run before the step counter moves on: they belong to the next step
    name = phase.failed
    at = step + 1 if name in ("data", "step") else step
    where = _PHASE_NAMES.get(name or "", "")
    try:
        setattr(exc, "_rlexp_failed_at", f"in {where} step {at}" if where else f"at step {at}")
    except AttributeError:  # an exception type with __slots__: the line goes without it
        pass


def run(cfg: Config, engine: "Engine", listeners: Listeners, run_dir: Path, *,
        checkpointer: "Checkpointer | None" = None, stop: "StopFlag | None" = None,
        resumed: dict[str, Any] | None = None, stops: "Stops | None" = None) -> dict[str, Any]:
    """Train cfg.train.steps global steps; returns the summary fields.

    `checkpointer` saves every train.checkpoint_every steps, at the end, and when `stop`
    (SIGTERM) is set; `resumed` is the metadata of the checkpoint the engine was restored from;
    `stops` (early stopping, sweep pruning) may end training before cfg.train.steps.
    """

    state = LoopState(step=engine.start_step, seed=cfg.train.seed)
    phase = PhaseTimer()
    try:
        return _run(cfg, engine, listeners, run_dir, state, phase, checkpointer, stop, resumed,
                    stops)
    except (NonFinite, Preempted):
        raise
    except Exception as exc:  # the error line names the step (and the phase) it broke in
        _note_where(exc, phase, state.step)
        raise


def _run(cfg: Config, engine: "Engine", listeners: Listeners, run_dir: Path, state: LoopState,
         phase: PhaseTimer, checkpointer: "Checkpointer | None", stop: "StopFlag | None",
         resumed: dict[str, Any] | None, stops: "Stops | None") -> dict[str, Any]:
    every_ckpt = cfg.train.checkpoint_every
    flops = step_flops(cfg, engine.rollout_batch)
    peak = peak_tflops(cfg)
    profiler = StepProfiler(cfg.run.profile_steps, run_dir)
    # training-rollout tables: every tracker.log_completions_every steps, else at each eval
    rollouts_every = 0 if cfg.tracker.name == "none" else (
        cfg.eval.every if cfg.tracker.log_completions_every is None
        else cfg.tracker.log_completions_every)
    stopped: str | None = None

    def run_eval() -> dict[str, float]:
        with phase("evaluate"):
            metrics, samples = evaluate(engine, eval_key(state.seed))
        with phase("log"):
            listeners.on_eval(state.step, metrics, samples)
        state.eval_last = metrics
        return metrics

    def checkpoint(**extra: Any) -> None:
        if checkpointer is None:
            return
        with phase("checkpoint"):
            path = checkpointer.save(state.step, state.seed,
                                     {"eval_before": state.eval_before, **extra})
        listeners.on_checkpoint(state.step, path)

    if resumed is None:
        state.eval_before = run_eval()
        if every_ckpt:  # step 0 is durable too: a crash before the first save resumes here
            checkpoint()
    else:
        state.eval_before = resumed.get("eval_before", {})
    while state.step < cfg.train.steps and stopped is None:
        profiler.before(state.step + 1)
        with phase("data"):
            batch = engine.splits.train_batch(state.step, cfg.train.batch_size, state.seed)
        lr = float(engine.schedule(state.step * engine.updates_per_step))
        with phase("step"):
            metrics = engine.train_step(batch, rollout_key(state.seed, state.step + 1))
        state.step += 1
        step_s = phase.last["step"]
        tokens = metrics.get("train/completion_length", 0.0) * engine.rollout_batch
        metrics.update({"train/learning_rate": lr, "time/step_s": step_s,
                        "time/train_s": max(step_s - metrics.get("time/prepare_s", 0.0), 0.0),
                        "time/data_s": phase.last["data"],
                        "throughput/tokens_per_s": tokens / step_s if step_s > 0 else 0.0,
                        **utilization(flops, step_s, peak)})
        # checkpoint and log since the previous step: time/<phase>_s. An evaluation's seconds
        # are its own time/eval_s, logged with it at its step (job/evaluate.py), not here.
        metrics.update({f"time/{k}_s": v for k, v in phase.take().items()
                        if k not in ("step", "data", "evaluate")})
        check_finite(state.step, metrics)
        state.train_last = metrics
        with phase("log"):
            listeners.on_metrics(state.step, metrics)
            if rollouts_every and (state.step % rollouts_every == 0
                                   or state.step == cfg.train.steps):  # and the last step
                listeners.on_rollouts(state.step, engine.rollouts())
        traced = profiler.after(state.step)
        if traced is not None:
            listeners.on_artifact(traced, traced.name)
        if stops is not None:
            stopped = stops.check(state.step, metrics)
        if cfg.eval.every and state.step % cfg.eval.every == 0 and state.step < cfg.train.steps \
                and stopped is None:
            evaluated = run_eval()
            if stops is not None:
                stopped = stops.check(state.step, evaluated)
        if stopped is not None:
            log.info("rlexp: stopping at step %d: %s", state.step, stopped)
            break
        saved = bool(every_ckpt) and state.step % every_ckpt == 0 and state.step < cfg.train.steps
        if saved:
            checkpoint()
        if stop is not None and any_process(stop.requested) and state.step < cfg.train.steps:
            if not saved:
                checkpoint()
            raise Preempted(f"step {state.step}")
    if resumed is not None and resumed.get("eval_after") and resumed["step"] == cfg.train.steps:
        eval_after = resumed["eval_after"]  # finished before: do not evaluate (or log) twice
    else:
        eval_after = run_eval()
        checkpoint(eval_after=eval_after)
    traced = profiler.close()  # the run ended inside the traced steps
    if traced is not None:
        listeners.on_artifact(traced, traced.name)
    stop_fields = {"stop_reason": stopped} if stopped else {}
    return {"steps_done": state.step, **stop_fields,
            "eval_before": state.eval_before, "eval_after": eval_after,
            "train_final": state.train_last,
            "phase_seconds": {k: round(v, 3) for k, v in phase.total.items()},
            "engine": engine.info}
