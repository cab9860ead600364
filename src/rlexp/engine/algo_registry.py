"""Plug rlexp's maths into Tunix: registered by name, so Tunix's GRPOLearner calls ours.

  policy loss "rlexp"          -> rlexp.algo.losses.policy_loss (every algo.loss family)
  advantage   "rlexp_group"    -> rlexp.algo.advantages.group_advantages
  advantage   "rlexp_<name>"   -> rlexp.algo.advantages.advantages_by_name (algo.advantage)

`AlgoSettings` is Tunix's GRPOConfig carrying our loss's settings (Tunix's own fields filled to
agree, so its logs do). What rlexp's learner (engine/learner.py) changes in a scored batch is
here as functions of it: `whitened`, `with_sampler_logps`, `with_window`.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tunix.rl import common, function_registry
from tunix.rl.grpo.grpo_learner import GRPOConfig, TrainExample

from rlexp.algo import algorithm
from rlexp.algo import rollout_correction as rc
from rlexp.algo.advantages import advantages_by_name, group_advantages, masked_whiten
from rlexp.algo.choices import KL_ESTIMATORS, LOSS_AGGREGATIONS
from rlexp.algo.losses import (Divisors, kept_counts, kept_mask, masked_mean, masked_quantile,
                               policy_loss, truncated_rows)
from rlexp.algo.settings import AlgoConfig

POLICY_LOSS = "rlexp"
ADVANTAGE = "rlexp_group"
# Tunix's names for our KL estimators (GRPOConfig.kl_loss_mode); Tunix's default is k1.
TUNIX_KL_MODE = dict(zip(KL_ESTIMATORS, ("kl", "mse_kl", "low_var_kl")))
TUNIX_LOSS_AGG = {agg: agg.replace("sequence-mean-token-sum", "seq-mean-token-sum")
                  for agg in LOSS_AGGREGATIONS}
# Keys of the loss's aux dict, collected by the engine every update.
AUX_KEYS = ("pg_loss", "kl", "clip_fraction", "ratio_mean", "ratio_max", "ratio_min",
            "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "entropy",
            "entropy_q10", "logprob_diff", "logprob_diff_max", "is_weight_min", "is_weight_mean",
            "is_weight_max")
# The low quantile of the token entropies logged beside their mean (a collapse shows there
# first: most tokens near 0 while the mean is held up by a few).
ENTROPY_QUANTILE = 0.1


@dataclasses.dataclass(kw_only=True)
class AlgoSettings(GRPOConfig):
    # The algo section as rlexp's loss reads it (AlgoConfig.for_loss; Tunix's fields that mean
    # the same are set from it).
    loss: AlgoConfig
    # The completion budget in tokens (rollout.max_completion_length): Dr.GRPO's constant and
    # the length at which a completion without EOS counts as truncated. None = padded width.
    budget: int | None = None
    correction: rc.RolloutCorrection = rc.RolloutCorrection()


def algo_settings(a: AlgoConfig, budget: int | None = None) -> AlgoSettings:
    return AlgoSettings(
        loss=a.for_loss(), budget=budget, correction=rc.RolloutCorrection.from_algo(a),
        policy_loss_fn=POLICY_LOSS, advantage_estimator=advantage_estimator(a),
        loss_algo=algorithm.get(a.name).tunix_loss_algo, num_generations=a.num_generations,
        num_iterations=a.num_iterations, beta=a.beta, epsilon=a.epsilon,
        kl_loss_mode=TUNIX_KL_MODE[a.kl_estimator], loss_agg_mode=TUNIX_LOSS_AGG[a.loss_agg])


_REGISTERED: set[str] = set()


def advantage_estimator(a: AlgoConfig) -> str:
    """Tunix calls estimators as fn(rewards, num_generations): one registered name per
    algo.advantage, or per (algorithm, scale_rewards), carries the rest. Returns the name."""
    alg, scale, estimator = algorithm.get(a.name), a.scale_rewards, a.advantage
    if estimator == "grpo" and alg.advantages is algorithm.default_advantages and scale == "group":
        return ADVANTAGE
    name = f"rlexp_{a.name}_{scale}" if estimator == "grpo" else f"rlexp_{estimator}"

    def fn(rewards: np.ndarray, num_generations: int) -> np.ndarray:
        if estimator == "grpo":
            return alg.advantages(rewards, num_generations, scale)
        return advantages_by_name(estimator, rewards, num_generations)

    if name not in _REGISTERED:
        function_registry.register_advantage_estimator(name)(fn)
        _REGISTERED.add(name)
    return name


@flax.struct.dataclass(frozen=True)
class RolloutExample(TrainExample):
    """A training example, its sampler's per-token log-probs [B, T] (NaN where none) and the
    loss's runtime numbers, [B, K] with every row losses.runtime_numbers (rows: they shard along
    the batch as every other input does)."""
    sampler_logps: Any = None
    loss_numbers: Any = None


@flax.struct.dataclass(frozen=True)
class WindowedExample(RolloutExample):
    """A micro-batch and its window's divisors, each [B] so they shard along the batch."""
    window_tokens: Any = None
    window_rows: Any = None


def truncated(train_example: Any, algo_config: AlgoSettings, eos_id: int) -> Any:
    """[B] rows cut at the budget without EOS, or None when mask_truncated is off."""
    return truncated_rows(train_example.completion_ids, train_example.completion_mask, eos_id,
                          algo_config.budget) if algo_config.loss.mask_truncated else None


def whitened(example: Any) -> Any:
    """REINFORCE++: per-row scores as [B, T] advantages whitened over the completion tokens."""
    mask = np.asarray(example.completion_mask)
    adv = masked_whiten(np.asarray(example.advantages), mask)
    return example.replace(advantages=jax.device_put(adv))


def loss_from_logps(per_token_logps: Any, train_example: Any, algo_config: AlgoSettings,
                    eos_id: int = -1, entropy: Any = None) -> tuple[Any, dict[str, Any]]:
    """The registered loss after the forward pass; `entropy`: [B, T] per-token entropy."""
    divisors = weights = None
    if isinstance(train_example, WindowedExample) and train_example.window_tokens is not None:
        divisors = Divisors(tokens=jnp.max(train_example.window_tokens),
                            rows=jnp.max(train_example.window_rows))
    mask, sampler = train_example.completion_mask, getattr(train_example, "sampler_logps", None)
    numbers = getattr(train_example, "loss_numbers", None)
    c = algo_config.correction
    behaviour = None
    if sampler is not None:
        # The trainer's log-probs the rollout is compared with: the old ones, or (on-policy)
        # this forward's, the same weights (engine/learner.py's docstring).
        old = train_example.old_per_token_logps
        trainer = jax.lax.stop_gradient(per_token_logps if old is None else old)
        if c.enabled:
            weights = rc.importance_weights(trainer, sampler, mask, c)
        # A step without the sampler's log-probs has them all NaN (engine/learner.py): its rows
        # take pi_old as the behaviour, as when there are none.
        known = jnp.any(~jnp.isnan(sampler), axis=-1, keepdims=True)
        behaviour = jnp.where(known, sampler, trainer)
    loss, aux = policy_loss(per_token_logps, train_example.old_per_token_logps,
                            train_example.ref_per_token_logps, train_example.advantages,
                            train_example.completion_mask, algo_config.loss,
                            truncated(train_example, algo_config, eos_id), algo_config.budget,
                            divisors, entropy, weights, behaviour,
                            None if numbers is None else numbers[0])
    if sampler is not None:  # NaN on a step without them: the probe logs none
        aux.update({k: jnp.where(jnp.any(known), v, jnp.nan)
                    for k, v in rc.logprob_gap(trainer, sampler, mask).items()})
    if weights is not None:
        aux.update(rc.weight_stats(weights, mask, c.mode))
    return loss, aux


def _as(cls: type, example: Any, **changes: Any) -> Any:
    """`example` (a TrainExample) as a `cls` with `changes`: flax dataclasses cannot change type."""
    fields = {f.name: getattr(example, f.name) for f in dataclasses.fields(example)}
    return cls(**{**fields, **changes})


def with_window(examples: list[Any], algo_config: AlgoSettings, eos_id: int
                ) -> list[WindowedExample]:
    """The micro-batches with the window's kept tokens and rows: their gradients' mean is its."""

    tokens = rows = jnp.zeros((), jnp.float32)
    for ex in examples:
        mask = kept_mask(ex.completion_mask, ex.advantages, truncated(ex, algo_config, eos_id),
                         algo_config.loss)
        counts = kept_counts(mask)
        tokens, rows = tokens + counts.tokens, rows + counts.rows
    tokens, rows = tokens / len(examples), rows / len(examples)
    return [_as(WindowedExample, ex, window_tokens=jnp.full(len(ex.completion_mask), tokens),
                window_rows=jnp.full(len(ex.completion_mask), rows)) for ex in examples]


def with_sampler_logps(example: Any, sampler: Any, trainer: Any = None,
                       numbers: Any = None) -> RolloutExample:
    """The example as a RolloutExample with the sampler's log-probs (`trainer`: its old ones)
    and the loss's runtime numbers ([B, K]; None: the loss's settings as constants)."""
    old = {} if trainer is None else {"old_per_token_logps": trainer}
    return _as(RolloutExample, example, sampler_logps=sampler, loss_numbers=numbers, **old)


@function_registry.register_policy_loss_fn(POLICY_LOSS)
def policy_loss_fn(model: nnx.Module, train_example: Any, algo_config: AlgoSettings,
                   pad_id: int, eos_id: int, **_: Any) -> tuple[Any, dict[str, Any]]:
    """Tunix policy-loss signature: forward pass at the rollout temperature, then our loss."""
    graphdef, state = nnx.split(model)
    logps, logits = common.compute_per_token_logps(
        graphdef, state, prompt_tokens=train_example.prompt_ids,
        completion_tokens=train_example.completion_ids, pad_id=pad_id, eos_id=eos_id,
        stop_gradient=False, return_logits=True, temperature=algo_config.temperature)
    # The policy's entropy from the logits this forward already made: one more reduction
    # over the vocabulary, no second forward (TRL's GRPOTrainer logs it too); differentiated
    # only when the loss uses it.
    s = algo_config.loss
    uses_entropy = bool(s.entropy_coef) or s.top_entropy_quantile < 1.0
    entropy = token_entropy(logits if uses_entropy else jax.lax.stop_gradient(logits))
    loss, aux = loss_from_logps(logps, train_example, algo_config, eos_id,
                                entropy if uses_entropy else None)
    entropy, mask = jax.lax.stop_gradient(entropy), train_example.completion_mask
    aux.update(entropy=masked_mean(entropy, mask),
               entropy_q10=masked_quantile(entropy, mask, ENTROPY_QUANTILE))
    return loss, aux


def token_entropy(logits: Any) -> Any:
    """Entropy -sum(p log p) of softmax(logits) per position: [B, T, V] -> [B, T], never
    negative (log p <= 0 term by term). The normaliser is log1p of the mass off the top logit:
    float32's log(1 + tiny) rounds to 0 and loses the top token's term, 4% of H at H = 1e-6
    (float64's to 2e-5 relative here, tests/test_losses.py); logz - sum(p x logits) is worse."""
    shifted = logits.astype(jnp.float32)
    shifted = shifted - jnp.max(shifted, axis=-1, keepdims=True)
    e = jnp.exp(shifted)
    # The mass beside one top logit: the others' exp, plus 1 for each further tie at the top.
    rest = jnp.sum(jnp.where(shifted < 0, e, 0.0), axis=-1, keepdims=True) + (
        jnp.sum(shifted == 0, axis=-1, keepdims=True) - 1)
    norm = jnp.log1p(rest)
    # p from the exponentials already taken (one exp over the vocabulary, not two)
    return -jnp.sum(e / jnp.exp(norm) * jnp.where(e > 0, shifted - norm, 0.0), axis=-1)


@function_registry.register_advantage_estimator(ADVANTAGE)
def advantage_fn(rewards: np.ndarray, num_generations: int) -> np.ndarray:
    return group_advantages(rewards, num_generations)
