"""Engine state on disk: orbax through Tunix's CheckpointManager, plus Tunix's step counters.

A checkpoint holds the policy (with model.lora: the adapters alone), the optimizer state and, in
its metadata, the step counters of Tunix's learner, trainer and cluster: Tunix's final save drops
its global step (tunix/sft/peft_trainer.py close(), 0.1.7), so rlexp sets them back on restore.
Which checkpoint to resume is rlexp.job.resume's. Also, without orbax: `disk_full`, the
unfinished and committed saves on disk, and `quiet_orbax_failures`."""

from __future__ import annotations

import errno
import logging
import os
import re
import shutil
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from rlexp.base.files import read_json_object

if TYPE_CHECKING:
    from rlexp.engine import TunixEngine

# Imported inside functions, on purpose: orbax (3.1 s) and Tunix are imported when a store opens:
# pre-flight imports rlexp.engine for export's checkpoint lookup and never needs them.

# orbax writes step s into "<s>.orbax-checkpoint-tmp" and renames it to "<s>" once complete
# (orbax/checkpoint/_src/path/atomicity_types.py TMP_DIR_SUFFIX, 0.12).
TMP_MARK = ".orbax-checkpoint-tmp"
# Per step: orbax's JSON metadata, our counters under "custom_metadata".
METADATA_FILE = "_CHECKPOINT_METADATA"
# errno values of a full disk (no space, quota exceeded).
FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT)
# tensorstore (under orbax) reports a full disk as RESOURCE_EXHAUSTED with the file it wrote;
# XLA's out-of-memory is RESOURCE_EXHAUSTED too, so the write words must be there as well.
_TS_WRITE = ("Error writing", "Failed writing", "Failed to write")
_TS_PATH = re.compile(r'(?:local file|Failed writing:) "([^"]+)"')


class DiskFull(OSError):
    """The disk under `path` is full (a save or a write failed with ENOSPC)."""

    def __init__(self, path: str | Path, free: int | None):
        path = os.path.abspath(path) if is_local(path) else str(path)
        super().__init__(errno.ENOSPC, f"no space left on the disk of {path}", path)
        self.path = path  # where the write failed (a file or the checkpoint dir), absolute
        self.free = free  # bytes free on that disk then (None: not measurable, e.g. gs://)

    def describe(self) -> str:
        free = "unknown space" if self.free is None else human_bytes(self.free)
        return f"disk full writing {self.path} ({free} free)"


def human_bytes(n: float) -> str:
    for unit, scale in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if n >= scale:
            return f"{n / scale:.3g} {unit}"
    return f"{int(n)} bytes"


def nearest_existing(path: str | Path) -> Path:
    """`path`, or its nearest parent that exists (what a dir not made yet will live on)."""
    probe = Path(path).expanduser().absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    return probe


def is_local(path: Any) -> bool:
    return "://" not in str(path)


def free_bytes(path: str | Path) -> int | None:
    """Bytes a user may still write on the disk of `path` (None for a bucket or on error)."""
    if not is_local(path):
        return None
    try:
        return int(shutil.disk_usage(nearest_existing(path)).free)
    except OSError:
        return None


def disk_full(exc: BaseException, where: str | Path | None = None) -> DiskFull | None:
    """A DiskFull when `exc` (or an exception in its chain) is a full disk, else None. The
    path is the one the error names, else `where`."""
    seen: set[int] = set()
    error: BaseException | None = exc
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        if isinstance(error, DiskFull):
            return error
        text = str(error)
        if isinstance(error, OSError) and error.errno in FULL_ERRNOS:
            path = error.filename or where
        elif "No space left on device" in text or ("RESOURCE_EXHAUSTED" in text and any(
                w in text for w in _TS_WRITE) and "Out of memory" not in text):
            found = _TS_PATH.search(text)
            path = found.group(1) if found else where
        else:
            error = error.__cause__ or error.__context__
            continue
        path = str(path if path is not None else Path.cwd())
        if TMP_MARK in path:  # orbax's temporary dir is removed: name the checkpoints dir
            path = str(Path(path.split(TMP_MARK, 1)[0]).parent)
        return DiskFull(path, free_bytes(path))
    return None


def unfinished(directory: str | Path) -> list[Path]:
    """orbax's temporary dirs in a local checkpoints dir: saves that never completed."""
    if not is_local(directory) or not Path(directory).is_dir():
        return []
    return sorted(p for p in Path(directory).iterdir() if TMP_MARK in p.name)


def remove_unfinished(directory: str | Path) -> list[Path]:
    """Delete the unfinished saves (only the dir's owner calls this: it holds the lock)."""
    removed = unfinished(directory)
    for path in removed:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return removed


def committed_steps(directory: str | Path) -> list[int]:
    """Steps with a committed checkpoint in a local dir, newest first (no orbax)."""
    if not is_local(directory) or not Path(directory).is_dir():
        return []
    return sorted((int(p.name) for p in Path(directory).iterdir()
                   if p.name.isdigit() and p.is_dir()), reverse=True)


def read_metadata(directory: str | Path, step: int) -> dict[str, Any] | None:
    """rlexp's metadata of a committed local checkpoint, None when unreadable."""
    meta = (read_json_object(Path(directory) / str(step) / METADATA_FILE) or {}).get(
        "custom_metadata")
    return meta if isinstance(meta, dict) else None


def dir_bytes(path: str | Path) -> int:
    """Bytes of the files under a local dir."""
    total = 0
    for root, _, files in os.walk(path):
        for name in files:
            try:
                total += os.stat(os.path.join(root, name)).st_size
            except OSError:
                pass
    return total


# Log lines of orbax's background threads (absl, one per thread) and asyncio ("exception was
# never retrieved") that repeat what the save raised.
_ABSL_NOISE = ("_SignalingThread.run() raised an exception",
               # a leftover temporary dir of a killed save (rlexp removes them at open)
               "Attempted to create temporary directory")
_ORBAX_WORDS = ("orbax", "tensorstore", "RESOURCE_EXHAUSTED", "No space left")


def _orbax_noise(record: logging.LogRecord) -> bool:
    try:
        message = record.getMessage()
    except Exception:  # a malformed record is not ours to judge
        return True
    if record.name == "absl":
        return not any(n in message for n in _ABSL_NOISE)
    return not ("exception was never retrieved" in message
                and any(w in message for w in _ORBAX_WORDS))


_previous_hook: Any = None


def _unraisable_hook(unraisable: Any) -> None:
    """Drops tensorstore's write callbacks raising "Event loop is closed" into the loop orbax
    ran a failed save in, and orbax's coroutines dropped half-way (a failed save or restore)."""
    exc, obj = unraisable.exc_value, unraisable.object
    if isinstance(exc, RuntimeError) and str(exc) == "Event loop is closed":
        return
    code = getattr(obj, "cr_code", None) or getattr(obj, "__code__", None)
    if "orbax" not in str(getattr(code, "co_filename", "")):
        (_previous_hook or sys.__unraisablehook__)(unraisable)


def quiet_orbax_failures() -> None:
    """Drop echoes of a failed save's error in other threads (its own exception says it all)."""
    global _previous_hook
    for name in ("absl", "asyncio"):
        logging.getLogger(name).addFilter(_orbax_noise)  # a no-op when already there
    if sys.unraisablehook is not _unraisable_hook:
        _previous_hook = sys.unraisablehook
        sys.unraisablehook = _unraisable_hook


class EngineCheckpoints:
    """CheckpointStore of a TunixEngine: policy + optimizer in `directory`, newest `keep` kept."""

    def __init__(self, engine: "TunixEngine", directory: str, keep: int):
        import orbax.checkpoint as ocp
        from tunix.sft.checkpoint_manager import CheckpointManager

        quiet_orbax_failures()
        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                               enable_async_checkpointing=False)
        self.engine = engine
        self.manager = CheckpointManager(directory, options=options)
        self._orbax = self.manager._checkpoint_manager
        self.lora = engine.cfg.model.lora.rank > 0

    def save(self, step: int, meta: dict[str, Any]) -> None:
        """Synchronous: when this returns, step `step` is durable."""
        engine, trainer = self.engine, self.engine.cluster.actor_trainer
        self._global_counters()
        # Tunix's private step counters (all four must move together on resume), and the
        # cumulative token count the step metrics report
        counters = {"learner_iter_steps": int(engine.learner._iter_steps),
                    "trainer_train_steps": int(trainer._train_steps),
                    "trainer_iter_steps": int(trainer._iter_steps),
                    "cluster_global_steps": int(engine.cluster.global_steps),
                    "tokens_seen": int(engine.probe.tokens_seen)}
        # model.lora: the adapters (and their optimizer state) only, as Tunix's trainer saves a
        # LoRA model (peft_trainer.py): the base is rebuilt from model.path and the warm start
        self.manager.save(step, trainer.model, trainer.optimizer, force=True,
                          save_only_lora_params=self.lora, custom_metadata={**meta, **counters})
        self._orbax.wait_until_finished()

    def steps(self) -> list[int]:
        """Committed steps, newest first (re-read from disk: orbax caches its list)."""
        self._orbax.reload()
        return sorted(self._orbax.all_steps(), reverse=True)

    def restore(self, step: int) -> dict[str, Any]:
        """Load `step` into policy and optimizer; returns its metadata. Raises orbax's errors."""
        trainer = self.engine.cluster.actor_trainer
        self._global_counters()
        _, meta = self.manager.maybe_restore(trainer.model, trainer.optimizer, step=step,
                                             restore_only_lora_params=self.lora)
        # the schedule's numbers are optimizer state: this run's config, not the saver's
        from rlexp.engine import lr_schedule, tunix_adapter

        lr_schedule.set_numbers(trainer.optimizer, tunix_adapter.schedule_numbers(self.engine.cfg))
        return dict(meta)

    def resume(self, meta: dict[str, Any]) -> None:
        """After a restore: Tunix's counters back, and the rollout model given the weights."""
        learner, cluster = self.engine.learner, self.engine.cluster
        learner._iter_steps = meta["learner_iter_steps"]
        learner._last_iter_step = meta["learner_iter_steps"]  # no fast-forward of our batches
        cluster.actor_trainer._train_steps = meta["trainer_train_steps"]
        cluster.actor_trainer._iter_steps = meta["trainer_iter_steps"]
        self.engine.probe.tokens_seen = int(meta.get("tokens_seen", 0))
        cluster.global_steps = meta["cluster_global_steps"]
        if learner.should_sync_weights:
            cluster.copy_weights()

    def _global_counters(self) -> None:
        """Multi-controller: orbax takes global arrays only, but nnx.Optimizer's step counter is
        on one device: replicate such arrays over the trainer's mesh (same value everywhere)."""
        import jax
        from flax import nnx
        from tunix.rl.rl_cluster import Role

        if jax.process_count() == 1:
            return
        mesh = self.engine.cluster.cluster_config.role_to_mesh[Role.ACTOR]
        replicated = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec())

        def to_global(x: Any) -> Any:
            if isinstance(x, jax.Array) and x.is_fully_addressable:
                host = np.asarray(x)
                return jax.make_array_from_callback(host.shape, replicated, lambda i: host[i])
            return x

        optimizer = self.engine.cluster.actor_trainer.optimizer
        nnx.update(optimizer, jax.tree_util.tree_map(to_global, nnx.state(optimizer)))

    def close(self) -> None:
        self.manager.close()
