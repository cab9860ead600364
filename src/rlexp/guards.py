"""Settings that silently do nothing, detected up front.

In Tunix 0.1.7 the old log-probs of the importance ratio are computed only when
num_iterations > 1 (grpo_learner.py); otherwise the loss uses stop_gradient(current), so
the ratio is exactly 1, nothing is clipped, and GRPO and GSPO give bit-identical updates.
Several mini-batches per rollout batch do not change this: Tunix rolls out each mini-batch
with the current weights. So: on-policy <=> num_iterations == 1.
"""

from __future__ import annotations

import logging

from rlexp.config import Config

log = logging.getLogger("rlexp")

# Keys whose values cannot matter in an on-policy run (a sweep over them is wasted).
NOOP_KEYS = ("algo.epsilon", "algo.epsilon_high", "algo.name")


def on_policy_noop(cfg: Config) -> bool:
    """True when the importance ratio is exactly 1, so NOOP_KEYS change nothing."""
    return cfg.algo.num_iterations == 1


def noop_message(cfg: Config) -> str:
    return (f"algo.num_iterations={cfg.algo.num_iterations}: updates are on-policy, the importance "
            f"ratio is exactly 1, so {', '.join(NOOP_KEYS)} change nothing "
            f"(set algo.num_iterations>=2 for clipping and GSPO to act)")


def warn_if_noop(cfg: Config) -> bool:
    if on_policy_noop(cfg):
        log.warning(noop_message(cfg))
        return True
    return False
