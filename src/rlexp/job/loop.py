"""The training loop: a flat sequence of named, timed phases.

    begin: evaluate (before), checkpoint -> for each step: train_step: data, step (rollout,
    reward, advantage and update inside Tunix's learner), check; log_step; check_stops:
    [evaluate], [stop?]; save_or_preempt: [checkpoint] -> end: evaluate (after), checkpoint

The data order and every sampling key are pure functions of (seed, step), so a checkpoint
needs the step, the weights and the optimizer state only. A checkpoint at step s is taken after
step s's metrics and evaluation were emitted, so a resume from s repeats none of them.
"""

from __future__ import annotations

import logging
import time
from contextlib import contextmanager, suppress
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
    """A loss or reward became NaN/Inf: the run stops."""


def check_finite(step: int, metrics: dict[str, float]) -> None:
    bad = guards.nonfinite(metrics)
    if bad:
        raise NonFinite(f"step {step}: {', '.join(f'{k}={metrics[k]}' for k in bad)}; stopped")


# What each phase is called in an error line ("... in the evaluation at step 0").
_PHASE_NAMES = {"data": "the data of", "step": "", "evaluate": "the evaluation at",
                "checkpoint": "the checkpoint of", "log": "the logging of"}


def failed_at(exc: BaseException) -> str | None:
    """Where in the loop `exc` was raised ('at step 3', 'in the evaluation at step 0')."""
    return getattr(exc, "_rlexp_failed_at", None)


def _note_where(exc: BaseException, phase: "PhaseTimer", step: int) -> None:
    # data and step run before the step counter moves on: they belong to the next step
    name = phase.failed
    at = step + 1 if name in ("data", "step") else step
    where = _PHASE_NAMES.get(name or "", "")
    with suppress(AttributeError):  # an exception type with __slots__: the line goes without it
        setattr(exc, "_rlexp_failed_at", f"in {where} step {at}" if where else f"at step {at}")


def train_steps(cfg: Config, engine: "Engine", listeners: Listeners, run_dir: Path, *,
                checkpointer: "Checkpointer | None" = None, stop: "StopFlag | None" = None,
                resumed: dict[str, Any] | None = None,
                stops: "Stops | None" = None) -> dict[str, Any]:
    """Train cfg.train.steps global steps (`stops` may end sooner); the summary fields."""
    state = LoopState(step=engine.start_step, seed=cfg.train.seed)
    phase = PhaseTimer()
    try:
        return _run(Training(
            cfg, engine, listeners, state, phase, checkpointer, stop, resumed, stops,
            flops=step_flops(cfg, engine.rollout_batch), peak=peak_tflops(cfg),
            profiler=StepProfiler(cfg.run.profile_steps, run_dir),
            rollouts_every=_rollouts_every(cfg)))
    except (NonFinite, Preempted):
        raise
    except Exception as exc:  # the error line names the step (and the phase) it broke in
        _note_where(exc, phase, state.step)
        raise


@dataclass
class Training:
    """One call of train_steps(): what its phases share."""

    cfg: Config
    engine: "Engine"
    listeners: Listeners
    state: LoopState
    phase: PhaseTimer
    checkpointer: "Checkpointer | None"
    # SIGTERM: checkpoint and stop (Preempted).
    stop: "StopFlag | None"
    # Metadata of the checkpoint the engine was restored from (None: from step 0).
    resumed: dict[str, Any] | None
    stops: "Stops | None"
    profiler: StepProfiler
    # Model FLOPs of one step and the devices' peak TFLOP/s: perf/tflops and perf/mfu.
    flops: float
    peak: float | None
    # Training-rollout tables every this many steps (0: none).
    rollouts_every: int


def _rollouts_every(cfg: Config) -> int:
    """tracker.log_completions_every, else at each evaluation (0 without a tracker)."""
    if cfg.tracker.name == "none":
        return 0
    every = cfg.tracker.log_completions_every
    return cfg.eval.every if every is None else every


def _run(t: Training) -> dict[str, Any]:
    begin(t)
    stopped: str | None = None
    while t.state.step < t.cfg.train.steps:
        t.profiler.before(t.state.step + 1)
        metrics = train_step(t)
        log_step(t, metrics)
        _artifact(t, t.profiler.after(t.state.step))
        stopped = check_stops(t, metrics)
        if stopped is not None:
            log.info("rlexp: stopping at step %d: %s", t.state.step, stopped)
            break
        save_or_preempt(t)
    return end(t, stopped)


def evaluate_now(t: Training) -> dict[str, float]:
    with t.phase("evaluate"):
        metrics, samples = evaluate(t.engine, eval_key(t.state.seed))
    with t.phase("log"):
        t.listeners.on_eval(t.state.step, metrics, samples)
    return metrics


def save(t: Training, **extra: Any) -> None:
    """A checkpoint of this step (none without a checkpointer)."""
    if t.checkpointer is None:
        return
    with t.phase("checkpoint"):
        path = t.checkpointer.save(t.state.step, t.state.seed,
                                   {"eval_before": t.state.eval_before, **extra})
    t.listeners.on_checkpoint(t.state.step, path)


def begin(t: Training) -> None:
    """The evaluation before training and step 0's checkpoint (a resume has both)."""
    if t.resumed is not None:
        t.state.eval_before = t.resumed.get("eval_before", {})
        return
    t.state.eval_before = evaluate_now(t)
    if t.cfg.train.checkpoint_every:  # step 0 is durable too: a crash before the first save
        save(t)  # resumes here


def train_step(t: Training) -> dict[str, float]:
    """One global step and its metrics with the step's timings; NonFinite for a NaN/Inf."""
    state, engine = t.state, t.engine
    size, last = t.cfg.train.batch_size, t.cfg.train.steps
    with t.phase("data"):  # step s (0-based) trains on batch s, sampled with key s + 1
        batch = engine.splits.train_batch(state.step, size, state.seed)
        # rollout.off_policy_steps: the next steps' batches and keys, sampled beside this one
        ahead = [(engine.splits.train_batch(s, size, state.seed), rollout_key(state.seed, s + 1))
                 for s in range(state.step + 1,
                                min(state.step + 1 + t.cfg.rollout.off_policy_steps, last))]
    lr = float(engine.schedule(state.step * engine.updates_per_step))
    with t.phase("step"):
        metrics = engine.train_step(batch, rollout_key(state.seed, state.step + 1), ahead)
    state.step += 1
    step_s = t.phase.last["step"]
    tokens = metrics.get("train/completion_length", 0.0) * engine.rollout_batch
    metrics.update({"train/learning_rate": lr, "time/step_s": step_s,
                    "time/train_s": max(step_s - metrics.get("time/prepare_s", 0.0), 0.0),
                    "time/data_s": t.phase.last["data"],
                    "throughput/tokens_per_s": tokens / step_s if step_s > 0 else 0.0,
                    **utilization(t.flops, step_s, t.peak)})
    # checkpoint and log since the previous step: time/<phase>_s. An evaluation's seconds
    # are its own time/eval_s, logged with it at its step (job/evaluate.py), not here.
    metrics.update({f"time/{k}_s": v for k, v in t.phase.take().items()
                    if k not in ("step", "data", "evaluate")})
    check_finite(state.step, metrics)
    state.train_last = metrics
    return metrics


def log_step(t: Training, metrics: dict[str, float]) -> None:
    """The step's metrics, and its rollouts every `rollouts_every` steps and at the last."""
    step = t.state.step
    with t.phase("log"):
        t.listeners.on_metrics(step, metrics)
        if t.rollouts_every and (step % t.rollouts_every == 0
                                 or step == t.cfg.train.steps):  # and the last step
            t.listeners.on_rollouts(step, t.engine.rollouts())


def check_stops(t: Training, metrics: dict[str, float]) -> str | None:
    """Why training stops now (None: it goes on), asked after the step's metrics and after
    the evaluation every eval.every steps (not at the last: end evaluates)."""
    step, every = t.state.step, t.cfg.eval.every
    stopped = t.stops.check(step, metrics) if t.stops is not None else None
    if every and step % every == 0 and step < t.cfg.train.steps and stopped is None:
        evaluated = evaluate_now(t)
        if t.stops is not None:
            stopped = t.stops.check(step, evaluated)
    return stopped


def save_or_preempt(t: Training) -> None:
    """A checkpoint every train.checkpoint_every steps; on SIGTERM (any process's), one now
    (unless just saved), then Preempted. Neither at the last step: end saves it."""
    step, every, last = t.state.step, t.cfg.train.checkpoint_every, t.cfg.train.steps
    saved = bool(every) and step % every == 0 and step < last
    if saved:
        save(t)
    # any_process is a collective: every process calls it at every step, the last included
    if t.stop is not None and any_process(t.stop.requested) and step < last:
        if not saved:
            save(t)
        raise Preempted(f"step {step}")


def end(t: Training, stopped: str | None) -> dict[str, Any]:
    """The evaluation after training and the last checkpoint (once, even on a rerun), the
    profiler's trace, and the summary fields."""
    resumed = t.resumed
    if resumed is not None and resumed.get("eval_after") and resumed["step"] == t.cfg.train.steps:
        eval_after = resumed["eval_after"]  # finished before: do not evaluate (or log) twice
    else:
        eval_after = evaluate_now(t)
        save(t, eval_after=eval_after)
    _artifact(t, t.profiler.close())  # the run ended inside the traced steps
    stop_fields = {"stop_reason": stopped} if stopped else {}
    return {"steps_done": t.state.step, **stop_fields,
            "eval_before": t.state.eval_before, "eval_after": eval_after,
            "train_final": t.state.train_last,
            "phase_seconds": {k: round(v, 3) for k, v in t.phase.total.items()},
            "engine": t.engine.info}


def _artifact(t: Training, traced: Path | None) -> None:
    if traced is not None:
        t.listeners.on_artifact(traced, traced.name)
