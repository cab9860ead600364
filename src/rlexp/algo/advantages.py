"""Group-relative advantages (GRPO, Shao et al. 2024, eq. in sec. 4.1.2)."""

from __future__ import annotations

import numpy as np

# Added to the group std so a group of equal rewards gives advantage 0, not 0/0.
STD_EPS = 1e-6


def group_advantages(rewards: np.ndarray, group_size: int, eps: float = STD_EPS) -> np.ndarray:
    """(r - mean_group) / (std_group + eps), std with Bessel's correction (ddof=1).

    `rewards` is flat [num_prompts * group_size], the completions of one prompt contiguous
    (the order Tunix's learner produces).
    """
    r = np.asarray(rewards, dtype=np.float64)
    if r.ndim != 1 or r.size % group_size:
        raise ValueError(f"rewards of shape {r.shape} is not a multiple of group_size={group_size}")
    groups = r.reshape(-1, group_size)
    mean = groups.mean(axis=1, keepdims=True)
    std = groups.std(axis=1, ddof=1, keepdims=True)
    return ((groups - mean) / (std + eps)).reshape(-1).astype(np.float32)
