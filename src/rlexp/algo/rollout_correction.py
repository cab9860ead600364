"""Trainer/sampler mismatch: measured every step, corrected by importance weights on request.

The sampler scores its tokens with its own kernels (a KV cache, other fusions, bf16), the trainer
with a full forward, so pi_sampler and pi_old differ even with the same weights and the gradient
is off-policy (Yao et al. 2025; TRL, verl and NeMo-RL correct it the same way). With d_t =
(log pi_old(y_t) - log pi_sampler(y_t)) x mask_t, the weight is exp(d_t) per token (token_*) or
exp(sum_t d_t) per sequence (sequence_*), clipped to [clip_min, clip_max] (*_truncate) or 0
outside them (*_mask), as TRL 1.16 GRPOTrainer._generate_and_score_completions; an unknown (NaN)
sampler log-prob gets weight 1. It multiplies the per-token policy loss (VESPO adds its log to
its sequence log-ratio: TRL get_gamma_weights). Checked in tests/test_rollout_correction.py.
The gap |log pi_old - log pi_sampler| is logged whatever the mode: ~1e-6 in float32 when the
two run the same weights at the same temperature.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

import jax.numpy as jnp
import numpy as np

from rlexp.algo.choices import ROLLOUT_CORRECTIONS


@dataclass(frozen=True)
class RolloutCorrection:
    """algo.rollout_correction (one of ROLLOUT_CORRECTIONS) and the weight's bounds, None = no
    bound (TRL vllm_importance_sampling_mode, _clip_min, _clip_max; rlexp.config.schema)."""

    mode: str = "none"
    clip_min: Optional[float] = None
    clip_max: Optional[float] = 3.0

    @property
    def enabled(self) -> bool:
        return self.mode != "none"

    @classmethod
    def from_algo(cls, algo: Any) -> RolloutCorrection:
        """The correction of an rlexp.config AlgoConfig (duck-typed: algo sits below config)."""
        return cls(mode=algo.rollout_correction, clip_min=algo.rollout_correction_clip_min,
                   clip_max=algo.rollout_correction_clip_max)


def is_sequence_level(mode: str) -> bool:
    return mode in ("sequence_truncate", "sequence_mask")


def importance_weights(old_logp: jnp.ndarray, sampler_logp: jnp.ndarray, mask: jnp.ndarray,
                       c: RolloutCorrection) -> jnp.ndarray:
    """The weights pi_old / pi_sampler of the module docstring: [B, T] for the token modes,
    [B, 1] for the sequence modes. Inputs [B, T]; sampler_logp may hold NaN (unknown)."""
    if c.mode not in ROLLOUT_CORRECTIONS or not c.enabled:
        raise ValueError(f"no importance weights for rollout correction {c.mode!r}; valid: "
                         f"{', '.join(m for m in ROLLOUT_CORRECTIONS if m != 'none')}")
    diff = (old_logp.astype(jnp.float32) - sampler_logp.astype(jnp.float32)) * mask
    diff = jnp.nan_to_num(diff, nan=0.0)
    if is_sequence_level(c.mode):
        diff = diff.sum(axis=-1, keepdims=True)
    w = jnp.exp(diff)
    if c.mode.endswith("_truncate"):
        return jnp.clip(w, c.clip_min, c.clip_max)
    lo = -jnp.inf if c.clip_min is None else c.clip_min
    hi = jnp.inf if c.clip_max is None else c.clip_max
    return jnp.where((w < lo) | (w > hi), 0.0, w)


def logprob_gap(old_logp: jnp.ndarray, sampler_logp: jnp.ndarray, mask: jnp.ndarray
                ) -> dict[str, jnp.ndarray]:
    """Mean and max of |old - sampler| over the mask's tokens whose sampler log-prob is known
    (0 when there are none): {"logprob_diff", "logprob_diff_max"}."""
    delta = jnp.abs(old_logp.astype(jnp.float32) - sampler_logp.astype(jnp.float32))
    keep = (mask > 0) & ~jnp.isnan(delta)
    n = keep.sum()
    mean = jnp.where(keep, delta, 0.0).sum() / jnp.maximum(n, 1)
    top = jnp.where(n > 0, jnp.max(jnp.where(keep, delta, -jnp.inf)), 0.0)
    return {"logprob_diff": mean, "logprob_diff_max": top}


def weight_stats(weights: jnp.ndarray, mask: jnp.ndarray, mode: str) -> dict[str, jnp.ndarray]:
    """Min, mean and max of the weights (TRL sampling/importance_sampling_ratio/*): over the
    mask's tokens for the token modes, over the rows for the sequence modes; 0 when empty."""
    w = weights.astype(jnp.float32)
    keep = jnp.ones(w.shape, bool) if is_sequence_level(mode) else mask > 0
    n = keep.sum()
    return {"is_weight_min": jnp.where(n > 0, jnp.min(jnp.where(keep, w, jnp.inf)), 0.0),
            "is_weight_mean": jnp.where(keep, w, 0.0).sum() / jnp.maximum(n, 1),
            "is_weight_max": jnp.where(n > 0, jnp.max(jnp.where(keep, w, -jnp.inf)), 0.0)}


def sampler_logps(rows: Any, width: int) -> np.ndarray:
    """The sampler's per-token log-probs, one sequence per completion (as RolloutOutput.logprobs
    holds them, aligned with its tokens), as a [B, width] float32 array; positions a row does
    not reach are NaN (unknown), a row longer than width is cut."""
    out = np.full((len(rows), width), np.nan, np.float32)
    for i, row in enumerate(rows):
        r = np.asarray(row, np.float32).reshape(-1)[:width]
        out[i, :r.size] = r
    return out
