"""What one training step did, gathered where Tunix computes it, fetched once per step.

Tunix logs its own metrics one step late, through a global jax.monitoring listener (0.1.7,
tunix/sft/metrics_logger.py); rlexp records them during the step, so step k's metrics are
complete when it returns. `metrics()` fetches everything in one `jax.device_get` (one sync per
step); completion lengths come from the tokens the sampler already copied to the host.
"""

from __future__ import annotations

import time
from collections import defaultdict
from typing import Any, Sequence

import numpy as np

# jax (1.4 s) is imported inside metrics(): pre-flight imports rlexp.engine and never needs it.

# aux/metric name -> how the per-update values of a step combine (default: mean).
_EXTREMES = {"ratio_max": np.max, "ratio_min": np.min, "logprob_diff_max": np.max,
             "is_weight_max": np.max, "is_weight_min": np.min}
# The per-update values logged as rollout/<name>, not train/<name>: the trainer/sampler gap
# and its importance weights (rlexp.algo.rollout_correction).
_ROLLOUT_NAMES = ("logprob_diff", "logprob_diff_max", "is_weight_min", "is_weight_mean",
                  "is_weight_max")


def completion_stats(lengths: Sequence[int], max_tokens: int) -> dict[str, float]:
    """Length diagnostics of a step's completions (TRL GRPOTrainer's completions/* family). A
    completion is clipped when it used the whole budget without an end token (Tunix's sampler
    cuts each row at its first EOS, excluded, so clipped <=> length == max_tokens)."""
    n = np.asarray(lengths, dtype=np.float64)
    if n.size == 0:
        return {}
    clipped = n >= max_tokens
    ended = n[~clipped]
    return {"train/completion_length": float(n.mean()),
            "train/completion_length_min": float(n.min()),
            "train/completion_length_max": float(n.max()),
            "train/clipped_ratio": float(clipped.mean()),
            "train/terminated_length": float(ended.mean()) if ended.size else 0.0}


def reward_stats(rewards: dict[str, Sequence[float]], group: int) -> dict[str, float]:
    """Reward mean/std per function and total, and the share of all-equal groups (TRL's
    frac_reward_zero_std)."""

    if not rewards:
        return {}
    per_fn = {k: np.asarray(v, dtype=np.float64) for k, v in rewards.items()}
    total = np.sum(list(per_fn.values()), axis=0)
    out = {"train/reward_mean": float(total.mean()), "train/reward_std": float(total.std())}
    for k, v in per_fn.items():
        out[f"train/reward/{k}"] = float(v.mean())
        out[f"train/reward_std/{k}"] = float(v.std())
    if group > 0 and total.size % group == 0:
        groups = total.reshape(-1, group)
        out["train/zero_std_groups"] = float(np.mean(np.ptp(groups, axis=1) == 0))
    out.update(distribution("train/reward_dist", total))
    return out


# Per-step distributions of the total reward and the advantage, as metrics (MLflow has no
# histogram type): these quantiles of the step's completions, plus min and max.
QUANTILES = (10, 25, 50, 75, 90)


def distribution(prefix: str, values: Sequence[float]) -> dict[str, float]:
    """{prefix/min, prefix/p10 ... prefix/p90, prefix/max} of `values` ({} if empty)."""
    v = np.asarray(values, dtype=np.float64).ravel()
    if v.size == 0:
        return {}
    qs = np.percentile(v, QUANTILES)
    return {f"{prefix}/min": float(v.min()),
            **{f"{prefix}/p{q}": float(x) for q, x in zip(QUANTILES, qs)},
            f"{prefix}/max": float(v.max())}


def rollout_rows(prompts: Sequence[str], completions: Sequence[str],
                 rewards: dict[str, Sequence[float]], advantages: Sequence[float],
                 lengths: Sequence[int], max_tokens: int) -> list[dict[str, Any]]:
    """One row per completion of a training step (TRL's log_completions)."""
    def at(values: Sequence[Any], i: int) -> Any:
        return values[i] if i < len(values) else None

    rows = []
    for i, completion in enumerate(completions):
        per_fn = {name: at(v, i) for name, v in rewards.items()}
        known = [x for x in per_fn.values() if x is not None]
        length = at(lengths, i)
        rows.append({"prompt": at(prompts, i), "completion": completion, **per_fn,
                     "reward": float(np.sum(known)) if known else None,
                     "advantage": at(advantages, i), "length": length,
                     "truncated": None if length is None else bool(length >= max_tokens)})
    return rows


def update_stats(updates: dict[str, list[Any]]) -> dict[str, float]:
    """Per-update values (already on the host) combined over the step's updates."""
    out: dict[str, float] = {}
    for k, v in updates.items():
        vals = np.asarray([np.asarray(x, dtype=np.float64) for x in v])
        if k in _ROLLOUT_NAMES and np.isnan(vals).all():
            continue  # a step without the sampler's log-probs (engine/algo_registry.py)
        name = f"rollout/{k}" if k in _ROLLOUT_NAMES else f"train/{k}"
        out[name] = float(_EXTREMES.get(k, np.mean)(vals))
    if updates:
        out["train/updates"] = float(len(next(iter(updates.values()))))
    return out


class StepProbe:
    def __init__(self, num_generations: int = 0, max_tokens: int = 0) -> None:
        # Completions per prompt (groups for the zero-std fraction).
        self.num_generations = num_generations
        # rollout.max_completion_length (a completion this long was clipped).
        self.max_tokens = max_tokens
        # Completion + prompt tokens of every training step so far (resumed from checkpoints).
        self.tokens_seen = 0
        self.reset()

    def reset(self) -> None:
        # reward name -> weighted values of every completion this step
        self.rewards: dict[str, list[float]] = defaultdict(list)
        # metric name -> one value per policy update this step (device arrays until fetched)
        self.updates: dict[str, list[Any]] = defaultdict(list)
        # completion lengths in tokens, every completion this step
        self.lengths: list[int] = []
        self.prompt_tokens = 0
        self.rollout_s = 0.0
        self.prepare_s = 0.0
        self.fetch_s = 0.0
        self.texts: list[str] = []
        # prompts (one per completion) and advantages (device arrays until fetched) of every
        # _generate_and_compute_advantage call of this step
        self.prompts: list[str] = []
        self.advantages: list[Any] = []
        # set by metrics(): one advantage per completion, and how many completions the step
        # sampled (evaluation's sampler calls extend texts/lengths after the step)
        self.advantage_values = np.zeros(0)
        self.rollout_count = 0

    def record_reward(self, name: str, values: list[float]) -> None:
        self.rewards[name].extend(values)

    def record_rollout(self, tokens: Sequence[Any], prompt_tokens: Any, pad_id: int) -> None:
        """Host-side token lists of one sampler call (no device transfer)."""
        self.lengths.extend(min(len(t), self.max_tokens or len(t)) for t in tokens)
        if prompt_tokens is not None:
            self.prompt_tokens += int(np.count_nonzero(np.asarray(prompt_tokens) != pad_id))

    def record_update(self, loss: Any, grad_norm: Any, aux: dict[str, Any]) -> None:
        """One policy update's loss, gradient norm and aux values (device arrays)."""
        self.updates["loss"].append(loss)
        self.updates["grad_norm"].append(grad_norm)
        for k, v in aux.items():
            self.updates[k].append(v)

    def record_generate(self, seconds: float, out: Any, pad_id: int) -> None:
        """One sampler call (a Tunix RolloutOutput) and its host seconds."""
        self.rollout_s += seconds
        self.texts.extend(out.text)
        self.record_rollout(out.tokens, out.left_padded_prompt_tokens, pad_id)

    def record_prepare(self, seconds: float, prompts: Sequence[Any], advantages: Any) -> None:
        """One batch sampled, scored and finished for the loss (advantages on the device)."""
        self.prepare_s += seconds
        self.prompts.extend(str(p) for p in prompts)
        self.advantages.append(advantages)

    def metrics(self) -> dict[str, float]:
        """Step metrics with rlexp's stable names; the one device->host fetch of the step."""
        import jax

        t = time.perf_counter()
        updates, advantages = jax.device_get((dict(self.updates), self.advantages))
        self.fetch_s = time.perf_counter() - t
        adv = [np.asarray(a, dtype=np.float64) for a in advantages]
        # one value per completion (a per-token advantage is averaged over its tokens)
        adv = [a.reshape(a.shape[0], -1).mean(axis=1) if a.ndim > 1 else a for a in adv]
        self.advantage_values = np.concatenate(adv) if adv else np.zeros(0)
        self.rollout_count = len(self.texts)
        out = reward_stats(self.rewards, self.num_generations)
        out.update(distribution("train/advantage_dist", self.advantage_values))
        out.update(update_stats(updates))
        out.update(completion_stats(self.lengths, self.max_tokens or 10**9))
        if self.lengths:
            self.tokens_seen += self.prompt_tokens + int(np.sum(self.lengths))
            out["train/tokens_seen"] = float(self.tokens_seen)
        return out

    def rows(self) -> list[dict[str, Any]]:
        """The latest training step's completions as rollout_rows (after metrics())."""
        n = self.rollout_count
        return rollout_rows(self.prompts, self.texts[:n], dict(self.rewards),
                            self.advantage_values, self.lengths[:n],
                            self.max_tokens or 10**9)
