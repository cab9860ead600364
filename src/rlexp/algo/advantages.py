"""Group-relative advantages (GRPO, Shao et al. 2024, sec. 4.1.2) and their scalings.

A_i = (r_i - mean_group(r)) / scale, with scale (TRL's `scale_rewards`):
  group  std of the prompt's group (GRPO)
  batch  std of all rewards of the batch (Hu et al. 2025 REINFORCE++ / TRL "batch")
  none   1: no std scaling (Dr.GRPO, Liu et al. 2025, arXiv:2503.20783, sec. 3.2)
Standard deviations use Bessel's correction (ddof=1), as torch.std in TRL does.
"""

from __future__ import annotations

import numpy as np

from rlexp.algo.choices import REWARD_SCALES

# Added to the std so a group of equal rewards gives advantage 0, not 0/0.
STD_EPS = 1e-6


def group_advantages(rewards: np.ndarray, group_size: int, eps: float = STD_EPS,
                     scale: str = "group") -> np.ndarray:
    """Flat [num_prompts * group_size] rewards -> advantages, same shape, float32.

    The completions of one prompt are contiguous (the order Tunix's learner produces). A
    group of equal rewards gets advantages exactly 0 under every scale (dynamic sampling
    relies on this to find such groups).
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or r.size % group_size:
        raise ValueError(f"rewards of shape {r.shape} is not a multiple of group_size={group_size}")
    groups = r.reshape(-1, group_size)
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
