"""Group-relative advantages (GRPO, Shao et al. 2024, sec. 4.1.2) and their scalings.

A_i = (r_i - mean_group(r)) / scale, with scale (TRL's `scale_rewards`):
  group  std of the prompt's group (GRPO)
  batch  std of all rewards of the batch (Hu et al. 2025 REINFORCE++ / TRL "batch")
  none   1: no std scaling (Dr.GRPO, Liu et al. 2025, arXiv:2503.20783, sec. 3.2)
Standard deviations use Bessel's correction (ddof=1), as torch.std in TRL does.

Other estimators (algo.advantage; checked against verl 0.9.1's core_algos.py and TRL 1.16's
RLOOTrainer in tests/test_advantages.py):
  rloo                   r_i - mean_{j != i} r_j, the leave-one-out baseline (Ahmadian et al.
                         2024, arXiv:2402.14740); no std scaling
  reinforce_pp           REINFORCE++ (Hu et al. 2025, arXiv:2501.03262): the outcome reward as
                         the return of every token (gamma 1), whitened over all the batch's
                         completion tokens (verl's masked_whiten: token-weighted mean,
                         unbiased variance, + 1e-8)
  reinforce_pp_baseline  the same after subtracting the group mean (REINFORCE++-baseline)
The REINFORCE++ pair needs the completion mask: per-row scores (`reinforce_pp_scores`), then
`masked_whiten` to [B, T] advantages where the mask is known (rlexp.engine.algo_registry).
"""

from __future__ import annotations

import numpy as np

from rlexp.algo.choices import ADVANTAGES, REWARD_SCALES, TOKEN_LEVEL_ADVANTAGES

# Added to the std so a group of equal rewards gives advantage 0, not 0/0.
STD_EPS = 1e-6


def _groups(rewards: np.ndarray, group_size: int) -> np.ndarray:
    """Flat rewards, a prompt's contiguous -> [num_prompts, group_size] float64."""
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or r.size % group_size:
        raise ValueError(f"rewards of shape {r.shape} is not a multiple of group_size={group_size}")
    return r.reshape(-1, group_size)


def group_advantages(rewards: np.ndarray, group_size: int, eps: float = STD_EPS,
                     scale: str = "group") -> np.ndarray:
    """Flat rewards -> advantages, same shape, float32. A group of equal rewards gets
    advantages exactly 0 under every scale (dynamic sampling relies on this)."""
    groups = _groups(rewards, group_size)
    r = groups.reshape(-1)
    centred = groups - groups.mean(axis=1, keepdims=True)
    # mean([x] * n) can differ from x in the last bit (0.1 * 3 / 3): equal groups are set to 0.
    centred[(groups == groups[:, :1]).all(axis=1)] = 0.0
    if scale == "group":
        centred = centred / (groups.std(axis=1, ddof=1, keepdims=True) + eps)
    elif scale == "batch":
        centred = centred / ((r.std(ddof=1) if r.size > 1 else 0.0) + eps)
    elif scale != "none":
        raise ValueError(f"unknown advantage scale {scale!r}; valid: {', '.join(REWARD_SCALES)}")
    return centred.reshape(-1).astype(np.float32)


def rloo_advantages(rewards: np.ndarray, group_size: int) -> np.ndarray:
    """RLOO: each reward minus the mean of the other group_size - 1 rewards of its group."""
    groups = _groups(rewards, group_size)
    if group_size < 2:
        return np.zeros(groups.size, np.float32)
    loo = (groups.sum(axis=1, keepdims=True) - groups) / (group_size - 1)
    return (groups - loo).reshape(-1).astype(np.float32)


def reinforce_pp_scores(rewards: np.ndarray, group_size: int, baseline: bool) -> np.ndarray:
    """Per-row REINFORCE++ scores before whitening: the rewards, minus the group mean with
    `baseline` (a group of one keeps its reward, as verl does)."""
    groups = _groups(rewards, group_size)
    if baseline and group_size > 1:
        groups = groups - groups.mean(axis=1, keepdims=True)
    return groups.reshape(-1).astype(np.float32)


def masked_whiten(scores: np.ndarray, mask: np.ndarray, eps: float = 1e-8) -> np.ndarray:
    """[B] row scores, [B, T] completion mask -> [B, T] advantages: every kept token carries its
    row's score, whitened over all kept tokens of the batch (mean 0, unbiased variance 1), as
    verl's masked_whiten on the tiled scores; 0 outside the mask."""
    m = np.asarray(mask, dtype=np.float64)
    values = np.asarray(scores, dtype=np.float64)[:, None] * m
    n = m.sum()
    if n < 2:
        return np.zeros(m.shape, np.float32)
    mean = (values * m).sum() / n
    var = (((values - mean) ** 2) * m).sum() / n * (n / (n - 1))
    return ((values - mean) / np.sqrt(var + eps) * m).astype(np.float32)


def advantages_by_name(name: str, rewards: np.ndarray, group_size: int, scale: str = "group"
                       ) -> np.ndarray:
    """algo.advantage -> per-row values: the advantages, or for the REINFORCE++ pair the
    scores that masked_whiten turns into advantages once the mask is known."""
    if name == "grpo":
        return group_advantages(rewards, group_size, scale=scale)
    if name == "rloo":
        return rloo_advantages(rewards, group_size)
    if name in TOKEN_LEVEL_ADVANTAGES:
        return reinforce_pp_scores(rewards, group_size, baseline=name.endswith("baseline"))
    raise ValueError(f"unknown advantage estimator {name!r}; valid: {', '.join(ADVANTAGES)}")
