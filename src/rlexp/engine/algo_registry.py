"""Plug rlexp's maths into Tunix: registered by name, so Tunix's GRPOLearner calls ours.

  policy loss "rlexp"          -> rlexp.algo.losses.policy_loss (GRPO token / GSPO sequence)
  advantage   "rlexp_group"    -> rlexp.algo.advantages.group_advantages

`AlgoSettings` extends Tunix's GRPOConfig with the fields our loss reads; Tunix's own
fields are filled consistently (loss_algo, kl_loss_mode, loss_agg_mode) so its logs agree.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np
from flax import nnx
from tunix.rl import common, function_registry
from tunix.rl.grpo.grpo_learner import GRPOConfig

from rlexp.algo.advantages import group_advantages
from rlexp.algo.kl import TUNIX_KL_MODE
from rlexp.algo.losses import LossSettings, policy_loss
from rlexp.config import AlgoConfig

POLICY_LOSS = "rlexp"
ADVANTAGE = "rlexp_group"
# Our aggregation names -> Tunix's (only the last differs).
TUNIX_LOSS_AGG = {"token-mean": "token-mean",
                  "sequence-mean-token-mean": "sequence-mean-token-mean",
                  "sequence-mean-token-sum": "seq-mean-token-sum"}
# Keys of the loss's aux dict, collected by the engine every update.
AUX_KEYS = ("pg_loss", "kl", "clip_fraction", "ratio_mean", "ratio_max", "ratio_min")


@dataclasses.dataclass(kw_only=True)
class AlgoSettings(GRPOConfig):
    # token (GRPO) | sequence (GSPO-token).
    ratio_level: str = "token"
    # Upper clip range (Tunix 0.1.7's GRPOConfig has no such field).
    epsilon_high: float = 0.2
    # k1 | k2 | k3 (rlexp's names; kl_loss_mode carries Tunix's).
    kl_estimator: str = "k3"
    # rlexp's aggregation name (loss_agg_mode carries Tunix's).
    loss_agg: str = "sequence-mean-token-mean"

    def loss_settings(self) -> LossSettings:
        return LossSettings(level=self.ratio_level, epsilon=self.epsilon,
                            epsilon_high=self.epsilon_high, beta=self.beta,
                            kl_estimator=self.kl_estimator, loss_agg=self.loss_agg)


def algo_settings(a: AlgoConfig) -> AlgoSettings:
    return AlgoSettings(
        policy_loss_fn=POLICY_LOSS, advantage_estimator=ADVANTAGE,
        loss_algo="gspo-token" if a.name == "gspo" else "grpo",
        ratio_level="sequence" if a.name == "gspo" else "token",
        num_generations=a.num_generations, num_iterations=a.num_iterations, beta=a.beta,
        epsilon=a.epsilon, epsilon_high=a.epsilon if a.epsilon_high is None else a.epsilon_high,
        kl_estimator=a.kl_estimator, kl_loss_mode=TUNIX_KL_MODE[a.kl_estimator],
        loss_agg=a.loss_agg, loss_agg_mode=TUNIX_LOSS_AGG[a.loss_agg])


def loss_from_logps(per_token_logps: Any, train_example: Any, algo_config: AlgoSettings
                    ) -> tuple[Any, dict[str, Any]]:
    """The part of the registered loss after the forward pass (tested on its own)."""
    return policy_loss(per_token_logps, train_example.old_per_token_logps,
                       train_example.ref_per_token_logps, train_example.advantages,
                       train_example.completion_mask, algo_config.loss_settings())


@function_registry.register_policy_loss_fn(POLICY_LOSS)
def policy_loss_fn(model: nnx.Module, train_example: Any, algo_config: AlgoSettings,
                   pad_id: int, eos_id: int, **_: Any) -> tuple[Any, dict[str, Any]]:
    """Tunix policy-loss signature: forward pass at the rollout temperature, then our loss."""
    graphdef, state = nnx.split(model)
    logps = common.compute_per_token_logps(
        graphdef, state, prompt_tokens=train_example.prompt_ids,
        completion_tokens=train_example.completion_ids, pad_id=pad_id, eos_id=eos_id,
        stop_gradient=False, return_logits=False, temperature=algo_config.temperature)
    return loss_from_logps(logps, train_example, algo_config)


@function_registry.register_advantage_estimator(ADVANTAGE)
def advantage_fn(rewards: np.ndarray, num_generations: int) -> np.ndarray:
    return group_advantages(rewards, num_generations)
