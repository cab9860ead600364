"""Plug rlexp's maths into Tunix: registered by name, so Tunix's GRPOLearner calls ours.

  policy loss "rlexp"          -> rlexp.algo.losses.policy_loss (GRPO token / GSPO sequence)
  advantage   "rlexp_group"    -> rlexp.algo.advantages.group_advantages

`AlgoSettings` is Tunix's GRPOConfig carrying our loss's settings, built once from the
algorithm config; Tunix's own fields are filled consistently (loss_algo, kl_loss_mode,
loss_agg_mode) so its logs agree.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tunix.rl import common, function_registry
from tunix.rl.grpo.grpo_learner import GRPOConfig

from rlexp.algo import algorithm
from rlexp.algo.advantages import group_advantages
from rlexp.algo.choices import KL_ESTIMATORS, LOSS_AGGREGATIONS
from rlexp.algo.losses import LossSettings, policy_loss, truncated_rows
from rlexp.config.schema import AlgoConfig

POLICY_LOSS = "rlexp"
ADVANTAGE = "rlexp_group"
# Tunix's names for our KL estimators (GRPOConfig.kl_loss_mode); Tunix's default is k1.
TUNIX_KL_MODE = dict(zip(KL_ESTIMATORS, ("kl", "mse_kl", "low_var_kl")))
# Tunix's names for our aggregations: the same but for seq-mean-token-sum.
TUNIX_LOSS_AGG = {agg: agg.replace("sequence-mean-token-sum", "seq-mean-token-sum")
                  for agg in LOSS_AGGREGATIONS}
# Keys of the loss's aux dict, collected by the engine every update.
AUX_KEYS = ("pg_loss", "kl", "clip_fraction", "ratio_mean", "ratio_max", "ratio_min",
            "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "entropy")


@dataclasses.dataclass(kw_only=True)
class AlgoSettings(GRPOConfig):
    # What rlexp's loss reads (Tunix's fields that mean the same are set from it).
    loss: LossSettings

    @property
    def ratio_level(self) -> str:
        """The resolved importance-ratio level, beside Tunix's loss_algo label for it."""
        return self.loss.level


def algo_settings(a: AlgoConfig) -> AlgoSettings:
    loss = LossSettings.from_algo(a)
    return AlgoSettings(
        loss=loss, policy_loss_fn=POLICY_LOSS, advantage_estimator=advantage_estimator(a),
        loss_algo=algorithm.get(a.name).tunix_loss_algo, num_generations=loss.group_size,
        num_iterations=a.num_iterations, beta=loss.beta, epsilon=loss.epsilon,
        kl_loss_mode=TUNIX_KL_MODE[loss.kl_estimator], loss_agg_mode=TUNIX_LOSS_AGG[loss.loss_agg])


def advantage_estimator(a: AlgoConfig) -> str:
    """Tunix calls estimators as fn(rewards, num_generations): one registered name per
    (algorithm, scale_rewards) carries the rest. Returns the name."""
    alg, scale = algorithm.get(a.name), a.scale_rewards
    if alg.advantages is algorithm.default_advantages and scale == "group":
        return ADVANTAGE
    name = f"rlexp_{a.name}_{scale}"
    if name not in _REGISTERED:
        function_registry.register_advantage_estimator(name)(
            lambda rewards, num_generations: alg.advantages(rewards, num_generations, scale))
        _REGISTERED.add(name)
    return name


_REGISTERED: set[str] = set()


def loss_from_logps(per_token_logps: Any, train_example: Any, algo_config: AlgoSettings,
                    eos_id: int = -1) -> tuple[Any, dict[str, Any]]:
    """The part of the registered loss after the forward pass (tested on its own)."""
    settings = algo_config.loss
    truncated = truncated_rows(train_example.completion_ids, train_example.completion_mask,
                               eos_id) if settings.mask_truncated else None
    return policy_loss(per_token_logps, train_example.old_per_token_logps,
                       train_example.ref_per_token_logps, train_example.advantages,
                       train_example.completion_mask, settings, truncated)


@function_registry.register_policy_loss_fn(POLICY_LOSS)
def policy_loss_fn(model: nnx.Module, train_example: Any, algo_config: AlgoSettings,
                   pad_id: int, eos_id: int, **_: Any) -> tuple[Any, dict[str, Any]]:
    """Tunix policy-loss signature: forward pass at the rollout temperature, then our loss."""
    graphdef, state = nnx.split(model)
    logps, logits = common.compute_per_token_logps(
        graphdef, state, prompt_tokens=train_example.prompt_ids,
        completion_tokens=train_example.completion_ids, pad_id=pad_id, eos_id=eos_id,
        stop_gradient=False, return_logits=True, temperature=algo_config.temperature)
    loss, aux = loss_from_logps(logps, train_example, algo_config, eos_id)
    # The policy's entropy from the logits this forward already made: one more reduction
    # over the vocabulary, no second forward, no gradient (TRL's GRPOTrainer logs it too).
    aux["entropy"] = masked_entropy(jax.lax.stop_gradient(logits), train_example.completion_mask)
    return loss, aux


def masked_entropy(logits: Any, mask: Any) -> Any:
    """Mean over unmasked tokens of the entropy of softmax(logits) [B, T, V] -> scalar."""
    logits = logits.astype(jnp.float32)
    logz = jax.nn.logsumexp(logits, axis=-1)
    probs = jnp.exp(logits - logz[..., None])
    entropy = logz - jnp.sum(probs * logits, axis=-1)
    mask = mask.astype(jnp.float32)
    return jnp.sum(entropy * mask) / jnp.maximum(jnp.sum(mask), 1.0)


@function_registry.register_advantage_estimator(ADVANTAGE)
def advantage_fn(rewards: np.ndarray, num_generations: int) -> np.ndarray:
    return group_advantages(rewards, num_generations)
