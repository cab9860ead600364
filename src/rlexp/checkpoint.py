"""Checkpoint and resume: orbax through Tunix's CheckpointManager, plus rlexp's own step.

A checkpoint holds the policy parameters, the optimizer state and our counters. Tunix's final
save drops its global step (DESIGN trap 2), so the step that matters lives in our metadata;
the data order and sampling keys are pure functions of (seed, step), so nothing else is needed.
Orbax writes a step into a temporary dir and renames it when complete, so a SIGKILL mid-save
leaves no half checkpoint under its final name; a committed one that fails to restore
(corrupt files) is skipped with a warning in favour of the one before.
"""

from __future__ import annotations

import logging
import signal
import time
from pathlib import Path
from typing import Any

log = logging.getLogger("rlexp")


class Preempted(Exception):
    """SIGTERM arrived: the loop saved a checkpoint at a step boundary and stops."""


class StopFlag:
    """SIGTERM sets it; the loop checks it between steps (a signal never interrupts an update
    halfway: the checkpoint is taken at a consistent step)."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:  # noqa: ARG002
        self.requested = True

    def __enter__(self) -> "StopFlag":
        self._previous = signal.signal(signal.SIGTERM, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        signal.signal(signal.SIGTERM, self._previous)


def _counters(engine: Any) -> dict[str, int]:
    learner, cluster = engine.learner, engine.cluster
    trainer = cluster.actor_trainer
    return {"learner_iter_steps": int(learner._iter_steps),
            "trainer_train_steps": int(trainer._train_steps),
            "trainer_iter_steps": int(trainer._iter_steps),
            "cluster_global_steps": int(cluster.global_steps)}


def _set_counters(engine: Any, meta: dict[str, Any]) -> None:
    learner, cluster = engine.learner, engine.cluster
    trainer = cluster.actor_trainer
    learner._iter_steps = meta["learner_iter_steps"]
    learner._last_iter_step = meta["learner_iter_steps"]  # no fast-forward of our batches
    trainer._train_steps = meta["trainer_train_steps"]
    trainer._iter_steps = meta["trainer_iter_steps"]
    cluster.global_steps = meta["cluster_global_steps"]


class Checkpointer:
    """Saves every `train.checkpoint_every` steps (and at the end), keeps the newest N."""

    def __init__(self, directory: Path, keep: int):
        import orbax.checkpoint as ocp
        from tunix.sft.checkpoint_manager import CheckpointManager

        self.directory = directory
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                               enable_async_checkpointing=False)
        self.manager = CheckpointManager(str(directory), options=options)
        self._orbax = self.manager._checkpoint_manager

    def save(self, step: int, engine: Any, seed: int, extra: dict[str, Any]) -> Path:
        """Save synchronously: when this returns, step `step` is durable."""
        trainer = engine.cluster.actor_trainer
        meta = {"step": step, "seed": seed, **_counters(engine), **extra}
        self.manager.save(step, trainer.model, trainer.optimizer, force=True, custom_metadata=meta)
        self._orbax.wait_until_finished()
        return self.directory / str(step)

    def steps(self) -> list[int]:
        self._orbax.reload()
        return sorted(self._orbax.all_steps(), reverse=True)

    def restore_latest(self, engine: Any, seed: int) -> dict[str, Any] | None:
        """Restore the newest checkpoint that loads; returns its metadata (None when none)."""
        trainer = engine.cluster.actor_trainer
        for step in self.steps():
            try:
                restored, meta = self.manager.maybe_restore(trainer.model, trainer.optimizer,
                                                            step=step)
                if meta.get("step") != step or meta.get("seed") != seed:
                    raise ValueError(f"metadata {meta} does not match step {step}, seed {seed}")
            except Exception as exc:  # corrupt or half-written: fall back to the previous one
                bad = self.directory / str(step)
                aside = bad.with_name(f"{step}.unusable-{int(time.time())}")
                log.warning("checkpoint %s is unusable (%s); moved to %s, trying an earlier one",
                            bad, str(exc).splitlines()[0][:200], aside.name)
                bad.rename(aside)  # kept for a post-mortem, out of orbax's way (it re-saves)
                self._orbax.reload()  # orbax caches its list of steps
                continue
            _set_counters(engine, meta)
            if engine.learner.should_sync_weights:
                engine.cluster.sync_weights()
            log.info("resumed from checkpoint %s (step %d)", self.directory / str(step), step)
            return meta
        return None

    def close(self) -> None:
        self.manager.close()
