"""What the loop, evaluation and checkpointing may ask of an engine (no Tunix here)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable, Protocol, Sequence

if TYPE_CHECKING:
    import numpy as np

    from rlexp.config.schema import Config
    from rlexp.data import Splits
    from rlexp.data.rewards import Term


class CheckpointStore(Protocol):
    """One engine's policy + optimizer + counters on disk, by step."""

    def save(self, step: int, meta: dict[str, Any]) -> None:
        """Synchronous: when it returns, `step` is durable with `meta` as its metadata."""

    def steps(self) -> list[int]:
        """Committed steps, newest first, re-read from disk."""

    def restore(self, step: int) -> dict[str, Any]:
        """Load `step` into the engine; its metadata. Raises for a corrupt step."""

    def resume(self, meta: dict[str, Any]) -> None:
        """After a restore that rlexp accepted: the engine's own counters and weight sync."""

    def close(self) -> None: ...


class Engine(Protocol):
    cfg: "Config"
    splits: "Splits"
    # Weighted reward terms (rlexp.rewards), shared by training and evaluation.
    terms: "list[Term]"
    # Global step the loop starts from (> 0 after a resume).
    start_step: int
    # What build() did (warm start, data counts), for logs and the summary.
    info: dict[str, Any]
    # Learning rate as a function of the optimizer update count.
    schedule: Callable[[int], Any]
    # Optimizer updates per global step (mini-batches x num_iterations).
    updates_per_step: int

    @property
    def rollout_batch(self) -> int:
        """Completions per global step."""

    def train_step(self, batch: dict[str, Any], key: Any,
                   ahead: Sequence[tuple[dict[str, Any], Any]] = ()) -> dict[str, float]:
        """One RL global step sampled with `key`; the step's metrics as host floats. `ahead`:
        the next rollout.off_policy_steps steps' (batch, key), sampled beside this update."""

    def rollouts(self) -> list[dict[str, Any]]:
        """The latest train_step's completions, one dict each: prompt, completion, each reward
        function's value, reward (total), advantage, length, truncated."""

    def generate(self, prompts: list[str], key: Any, greedy: bool) -> list[str]:
        """Evaluation completions of `prompts` (greedy, or sampled at eval.temperature)."""

    def policy_state(self) -> "dict[str, np.ndarray]":
        """A NumPy copy of the policy parameters (flattened names -> arrays)."""

    def checkpoint_store(self, directory: str, keep: int) -> CheckpointStore:
        """The store that saves and restores this engine under `directory`."""
