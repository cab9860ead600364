"""Engine state on disk: orbax through Tunix's CheckpointManager, plus Tunix's step counters.

A checkpoint holds the policy parameters, the optimizer state and, in its metadata, the
step counters of Tunix's learner, actor trainer and cluster. Tunix's final save drops its
global step (tunix/sft/peft_trainer.py, 0.1.7: close() saves without custom metadata), so
rlexp keeps its own step in the metadata and sets these counters back on restore. The
resume policy (which checkpoint, what to do with an unusable one) is rlexp.job.resume's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rlexp.engine import TunixEngine

# Imported inside functions, on purpose: orbax (3.1 s) and Tunix are imported when a store opens:
# pre-flight imports rlexp.engine for export's checkpoint lookup and never needs them.


def counters(engine: "TunixEngine") -> dict[str, int]:
    """Tunix's private step counters (all four must move together on resume), and the
    cumulative token count the step metrics report."""
    learner, cluster = engine.learner, engine.cluster
    trainer = cluster.actor_trainer
    return {"learner_iter_steps": int(learner._iter_steps),
            "trainer_train_steps": int(trainer._train_steps),
            "trainer_iter_steps": int(trainer._iter_steps),
            "cluster_global_steps": int(cluster.global_steps),
            "tokens_seen": int(engine.probe.tokens_seen)}


def set_counters(engine: "TunixEngine", meta: dict[str, Any]) -> None:
    learner, cluster = engine.learner, engine.cluster
    trainer = cluster.actor_trainer
    learner._iter_steps = meta["learner_iter_steps"]
    learner._last_iter_step = meta["learner_iter_steps"]  # no fast-forward of our batches
    trainer._train_steps = meta["trainer_train_steps"]
    trainer._iter_steps = meta["trainer_iter_steps"]
    cluster.global_steps = meta["cluster_global_steps"]
    engine.probe.tokens_seen = int(meta.get("tokens_seen", 0))


class EngineCheckpoints:
    """rlexp.engine.CheckpointStore of a TunixEngine: its policy + optimizer in `directory`,
    the newest `keep` steps kept."""

    def __init__(self, engine: "TunixEngine", directory: str, keep: int):
        import orbax.checkpoint as ocp
        from tunix.sft.checkpoint_manager import CheckpointManager

        options = ocp.CheckpointManagerOptions(max_to_keep=keep, create=True,
                                               enable_async_checkpointing=False)
        self.engine = engine
        self.manager = CheckpointManager(directory, options=options)
        self._orbax = self.manager._checkpoint_manager

    def save(self, step: int, meta: dict[str, Any]) -> None:
        """Synchronous: when this returns, step `step` is durable."""
        trainer = self.engine.cluster.actor_trainer
        self.manager.save(step, trainer.model, trainer.optimizer, force=True,
                          custom_metadata={**meta, **counters(self.engine)})
        self._orbax.wait_until_finished()

    def steps(self) -> list[int]:
        """Committed steps, newest first (re-read from disk: orbax caches its list)."""
        self._orbax.reload()
        return sorted(self._orbax.all_steps(), reverse=True)

    def restore(self, step: int) -> dict[str, Any]:
        """Load step `step` into the engine's policy and optimizer; returns its metadata.
        Raises whatever orbax raises for a corrupt or half-written step."""
        trainer = self.engine.cluster.actor_trainer
        _, meta = self.manager.maybe_restore(trainer.model, trainer.optimizer, step=step)
        return dict(meta)

    def resume(self, meta: dict[str, Any]) -> None:
        """After a restore: Tunix's counters back, and the rollout model given the weights."""
        set_counters(self.engine, meta)
        if self.engine.learner.should_sync_weights:
            self.engine.cluster.sync_weights()

    def close(self) -> None:
        self.manager.close()
