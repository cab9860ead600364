"""Checkpoint and resume policy; the engine's state on disk is rlexp.engine.checkpoint_store's.

A checkpoint holds the policy parameters, the optimizer state and our counters. Tunix's final
save drops its global step, so the step that matters lives in our metadata;
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
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlexp.engine import Engine

from rlexp.base.retention import prune_unusable

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


class Checkpointer:
    """Saves every `train.checkpoint_every` steps (and at the end), keeps the newest N."""

    def __init__(self, directory: Path, keep: int, engine: "Engine"):
        self.directory = directory
        self.store = engine.checkpoint_store(str(directory), keep)

    def save(self, step: int, seed: int, extra: dict[str, Any]) -> Path:
        """Save synchronously: when this returns, step `step` is durable."""
        self.store.save(step, {"step": step, "seed": seed, **extra})
        return self.directory / str(step)

    def steps(self) -> list[int]:
        return self.store.steps()

    def restore_latest(self, seed: int) -> dict[str, Any] | None:
        """Restore the newest checkpoint that loads; returns its metadata (None when none)."""
        for step in self.steps():
            try:
                meta = self.store.restore(step)
                if meta.get("step") != step or meta.get("seed") != seed:
                    raise ValueError(f"metadata {meta} does not match step {step}, seed {seed}")
            except Exception as exc:  # corrupt or half-written: fall back to the previous one
                bad = self.directory / str(step)
                aside = bad.with_name(f"{step}.unusable-{int(time.time())}")
                log.warning("checkpoint %s is unusable (%s); moved to %s, trying an earlier one",
                            bad, str(exc).splitlines()[0][:200], aside.name)
                bad.rename(aside)  # kept for a post-mortem, out of orbax's way (it re-saves)
                prune_unusable(self.directory)  # only the newest few (rlexp.base.retention)
                self.store.steps()  # re-read: orbax caches its list of steps
                continue
            self.store.resume(meta)
            log.info("resumed from checkpoint %s (step %d)", self.directory / str(step), step)
            return meta
        return None

    def close(self) -> None:
        self.store.close()
