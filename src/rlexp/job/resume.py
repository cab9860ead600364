"""Checkpoint and resume policy; the engine's state on disk is rlexp.engine.checkpoint_store's.

A checkpoint holds the policy parameters, the optimizer state and our counters (model.lora:
the adapters and their optimizer state only; the frozen base is rebuilt at start). Tunix's final
save drops its global step, so the step that matters lives in our metadata. Orbax writes a step
into a temporary dir and renames it when complete, so a SIGKILL mid-save leaves no half
checkpoint under its final name; a committed one that fails to restore (corrupt files) is set
aside with a warning in favour of the one before.

A full disk: before each save the free space is compared with the size of the checkpoint
before it (the plan's estimate for the first), and a save that fails with ENOSPC or
RESOURCE_EXHAUSTED has its unfinished dir removed; either way `save` raises DiskFull and the
checkpoints already committed stay as they are.
"""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlexp.engine import Engine

from rlexp.base.retention import prune_unusable
from rlexp.engine.checkpoint_store import (DiskFull, committed_steps, dir_bytes, disk_full,
                                           free_bytes, is_local, read_metadata,
                                           remove_unfinished)

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

    def __init__(self, directory: Path, keep: int, engine: "Engine",
                 checkpoint_bytes: float = 0.0):
        self.directory = directory
        # A save killed midway left orbax's temporary dir: remove it before orbax sees it.
        remove_unfinished(directory)
        self.store = engine.checkpoint_store(str(directory), keep)
        # Bytes the next save needs: the newest checkpoint's size, else the plan's estimate.
        self.expected = float(checkpoint_bytes)
        self._measured = False
        # A save failed (disk full): the store may not close cleanly.
        self.failed = False

    def save(self, step: int, seed: int, extra: dict[str, Any]) -> Path:
        """Save synchronously: when this returns, step `step` is durable. Raises DiskFull
        (nothing of this step left on disk) when the disk cannot hold it."""
        self._check_room()
        target = self.directory / str(step)
        existed = is_local(self.directory) and Path(target).exists()
        try:
            self.store.save(step, {"step": step, "seed": seed, **extra})
        except Exception as exc:
            full = disk_full(exc, self.directory)
            if full is None:
                raise
            self.failed = True
            # its temporary dir (and a final dir it made) go, the others stay
            remove_unfinished(self.directory)
            if is_local(self.directory) and not existed and Path(target).is_dir():
                shutil.rmtree(target, ignore_errors=True)
            with contextlib.suppress(Exception):  # the save's own error is the one reported
                self.store.steps()  # re-read: orbax caches its list of steps
            raise DiskFull(self.directory, full.free) from None
        if is_local(self.directory) and Path(target).is_dir():
            self.expected, self._measured = float(dir_bytes(target)), True
        return target

    def _check_room(self) -> None:
        if not self._measured and is_local(self.directory):
            newest = committed_steps(self.directory)
            if newest:  # a resumed run: the checkpoints on disk say how big one is
                self.expected = max(self.expected, float(dir_bytes(
                    Path(self.directory) / str(newest[0]))))
            self._measured = True
        free = free_bytes(self.directory)
        if free is not None and free < self.expected:
            self.failed = True
            raise DiskFull(self.directory, free)

    def last_good(self) -> int | None:
        """The newest committed step on disk (None: none, or not a local dir)."""
        steps = committed_steps(self.directory)
        return steps[0] if steps else None

    def restore_latest(self, seed: int) -> dict[str, Any] | None:
        """Restore the newest checkpoint that loads; returns its metadata (None when none)."""
        for step in self.store.steps():
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
        try:
            self.store.close()
        except Exception:
            if not self.failed:
                raise
            # after a failed save orbax may re-raise its error on close: reported already


def final_metadata(directory: Path) -> dict[str, Any] | None:
    """The metadata of the newest local checkpoint when it is a run's last one (the loop saves
    `eval_after` only at its end), read from disk without building anything; else None."""
    steps = committed_steps(directory)
    meta = read_metadata(directory, steps[0]) if steps else None
    return meta if meta is not None and meta.get("eval_after") else None
