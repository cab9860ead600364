"""Plug rlexp's maths into Tunix: registered by name, so Tunix's GRPOLearner calls ours.

  policy loss "rlexp"          -> rlexp.algo.losses.policy_loss (every algo.loss family)
  advantage   "rlexp_group"    -> rlexp.algo.advantages.group_advantages
  advantage   "rlexp_<name>"   -> rlexp.algo.advantages.advantages_by_name (algo.advantage)

REINFORCE++ whitens its advantages over the batch's completion tokens, which Tunix's
estimator signature (rewards, num_generations) cannot see: `whiten_over_tokens` finishes
them where the completion mask is made (the [B, T] result flows through Tunix as is).

Entropy: the loss's forward pass returns the logits, so the per-token entropy costs one
reduction over the vocabulary, no second forward; train/entropy (mean) and
train/entropy_q10 (10th percentile of the token entropies) are logged every step. Its
gradient is kept only when the loss uses it (entropy_coef, top_entropy_quantile).

`AlgoSettings` is Tunix's GRPOConfig carrying our loss's settings, built once from the
algorithm config; Tunix's own fields are filled consistently (loss_algo, kl_loss_mode,
loss_agg_mode) so its logs agree.

Gradient accumulation (train.micro_batch_size below the mini-batch): Tunix 0.1.7 wraps the
optimizer in optax.MultiSteps, which averages the micro-batch gradients, and each micro-batch
loss would divide by its own kept tokens (or rows). `normalise_over_windows` makes every
micro-batch divide by its accumulation window's counts instead (carried in a
`WindowedExample`), so micro-batch 1 and micro-batch = mini-batch give the same update.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tunix.rl import common, function_registry, rl_cluster as rl_cluster_lib
from tunix.rl.grpo.grpo_learner import GRPOConfig, TrainExample

from rlexp.algo import algorithm
from rlexp.algo.advantages import advantages_by_name, group_advantages, masked_whiten
from rlexp.algo.choices import KL_ESTIMATORS, LOSS_AGGREGATIONS, TOKEN_LEVEL_ADVANTAGES
from rlexp.algo.losses import (Divisors, LossSettings, kept_counts, kept_mask, masked_mean,
                               masked_quantile, policy_loss, truncated_rows)
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
            "clip_ratio/low_mean", "clip_ratio/high_mean", "clip_ratio/region_mean", "entropy",
            "entropy_q10")
# The low quantile of the token entropies logged beside their mean (a collapse shows there
# first: most tokens near 0 while the mean is held up by a few).
ENTROPY_QUANTILE = 0.1


@dataclasses.dataclass(kw_only=True)
class AlgoSettings(GRPOConfig):
    # What rlexp's loss reads (Tunix's fields that mean the same are set from it).
    loss: LossSettings
    # The completion budget in tokens (rollout.max_completion_length): Dr.GRPO's constant and
    # the length at which a completion without EOS counts as truncated. None = padded width.
    budget: int | None = None
    # algo.advantage (REINFORCE++ finishes its advantages over the completion tokens).
    advantage: str = "grpo"

    @property
    def ratio_level(self) -> str:
        """The resolved importance-ratio level, beside Tunix's loss_algo label for it."""
        return self.loss.level


def algo_settings(a: AlgoConfig, budget: int | None = None) -> AlgoSettings:
    """`budget`: rollout.max_completion_length (the engine always passes it)."""
    loss = LossSettings.from_algo(a)
    return AlgoSettings(
        loss=loss, budget=budget, advantage=a.advantage, policy_loss_fn=POLICY_LOSS,
        advantage_estimator=advantage_estimator(a),
        loss_algo=algorithm.get(a.name).tunix_loss_algo, num_generations=loss.group_size,
        num_iterations=a.num_iterations, beta=loss.beta, epsilon=loss.epsilon,
        kl_loss_mode=TUNIX_KL_MODE[loss.kl_estimator], loss_agg_mode=TUNIX_LOSS_AGG[loss.loss_agg])


def advantage_estimator(a: AlgoConfig) -> str:
    """Tunix calls estimators as fn(rewards, num_generations): one registered name per
    (algorithm, scale_rewards) carries the rest. Returns the name."""
    alg, scale = algorithm.get(a.name), a.scale_rewards
    if a.advantage != "grpo":
        name, fn = f"rlexp_{a.advantage}", advantages_by_name
        estimator = a.advantage
        if name not in _REGISTERED:
            function_registry.register_advantage_estimator(name)(
                lambda rewards, num_generations: fn(estimator, rewards, num_generations))
            _REGISTERED.add(name)
        return name
    if alg.advantages is algorithm.default_advantages and scale == "group":
        return ADVANTAGE
    name = f"rlexp_{a.name}_{scale}"
    if name not in _REGISTERED:
        function_registry.register_advantage_estimator(name)(
            lambda rewards, num_generations: alg.advantages(rewards, num_generations, scale))
        _REGISTERED.add(name)
    return name


_REGISTERED: set[str] = set()


@flax.struct.dataclass(frozen=True)
class WindowedExample(TrainExample):
    """A micro-batch and the divisors of its accumulation window (rlexp.algo.losses.Divisors:
    the window's kept tokens and kept rows over its number of micro-batches), each [B], one
    value repeated, so they shard along the batch like every other field."""
    window_tokens: Any = None
    window_rows: Any = None


def truncated(train_example: Any, algo_config: AlgoSettings, eos_id: int) -> Any:
    """[B] rows cut at the budget without EOS, or None when mask_truncated is off."""
    if not algo_config.loss.mask_truncated:
        return None
    return truncated_rows(train_example.completion_ids, train_example.completion_mask, eos_id,
                          algo_config.budget)


def whiten_over_tokens(learner: Any) -> None:
    """REINFORCE++(-baseline): turn the estimator's per-row scores into [B, T] advantages
    whitened over the completion tokens of each scored batch (wraps the learner's
    _generate_and_compute_advantage on the instance). No-op for the other estimators."""
    if learner.algo_config.advantage not in TOKEN_LEVEL_ADVANTAGES:
        return
    prepare = learner._generate_and_compute_advantage

    def prepare_whitened(*args: Any, **kw: Any) -> Any:
        out = prepare(*args, **kw)
        mask = np.asarray(out.completion_mask)
        adv = masked_whiten(np.asarray(out.advantages), mask)
        return out.replace(advantages=jax.device_put(adv))

    learner._generate_and_compute_advantage = prepare_whitened


def loss_from_logps(per_token_logps: Any, train_example: Any, algo_config: AlgoSettings,
                    eos_id: int = -1, entropy: Any = None) -> tuple[Any, dict[str, Any]]:
    """The part of the registered loss after the forward pass (tested on its own).
    `entropy`: [B, T] per-token entropy (needed by entropy_coef and top_entropy_quantile)."""
    divisors = None
    if isinstance(train_example, WindowedExample):
        divisors = Divisors(tokens=jnp.max(train_example.window_tokens),
                            rows=jnp.max(train_example.window_rows))
    return policy_loss(per_token_logps, train_example.old_per_token_logps,
                       train_example.ref_per_token_logps, train_example.advantages,
                       train_example.completion_mask, algo_config.loss,
                       truncated(train_example, algo_config, eos_id), algo_config.budget, divisors,
                       entropy)


def with_window(examples: list[Any], algo_config: AlgoSettings, eos_id: int
                ) -> list[WindowedExample]:
    """The micro-batches of one accumulation window, each carrying the window's divisors:
    its kept tokens and kept rows (counted as the loss keeps them) over len(examples). The
    mean over micro-batches of their gradients is then the whole window's gradient."""
    tokens = rows = jnp.zeros((), jnp.float32)
    for ex in examples:
        mask = kept_mask(ex.completion_mask, ex.advantages, truncated(ex, algo_config, eos_id),
                         algo_config.loss)
        counts = kept_counts(mask)
        tokens, rows = tokens + counts.tokens, rows + counts.rows
    tokens, rows = tokens / len(examples), rows / len(examples)
    out = []
    for ex in examples:
        fields = {f.name: getattr(ex, f.name) for f in dataclasses.fields(ex)}
        n = ex.completion_mask.shape[0]
        out.append(WindowedExample(**fields, window_tokens=jnp.full((n,), tokens),
                                   window_rows=jnp.full((n,), rows)))
    return out


class WindowQueue:
    """Stands in for Tunix's training data queue during one accumulation window: holds the
    micro-batches RLLearner._prepare_data puts (each [example], repeated num_iterations
    times) until the None that ends the window, then passes them on, windowed, in order.
    Tunix's trainer takes them only once the window is complete (with split trainer and
    sampler meshes it could have started on the first: the price of the exact divisor)."""

    def __init__(self, queue: Any, annotate: Callable[[list[Any]], list[Any]]):
        self.queue, self.annotate, self.items = queue, annotate, []

    def put(self, item: Any) -> None:
        if item is not None:
            self.items.append(item)
            return
        try:
            distinct = list({id(ex): ex for batch in self.items for ex in batch}.values())
            windowed = dict(zip(map(id, distinct), self.annotate(distinct)))
            for batch in self.items:
                self.queue.put([windowed[id(ex)] for ex in batch])
        finally:
            self.items = []
            self.queue.put(None)  # always: the trainer waits for it


def normalise_over_windows(learner: Any) -> None:
    """With gradient accumulation, route the learner's training micro-batches through a
    WindowQueue (wraps RLLearner._prepare_data on the instance). No-op without it."""
    steps = learner._training_config.get_with_default("gradient_accumulation_steps", 1)
    if not steps or steps <= 1:
        return
    prepare = learner._prepare_data
    eos_id = learner.rl_cluster.rollout.eos_id()

    def annotate(examples: list[Any]) -> list[Any]:
        return with_window(examples, learner.algo_config, eos_id)

    def prepare_data(*args: Any, data_queue: Any, mode: Any, **kw: Any) -> Any:
        if mode == rl_cluster_lib.Mode.TRAIN:
            data_queue = WindowQueue(data_queue, annotate)
        return prepare(*args, data_queue=data_queue, mode=mode, **kw)

    learner._prepare_data = prepare_data


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
    aux.update(entropy_stats(jax.lax.stop_gradient(entropy), train_example.completion_mask))
    return loss, aux


def token_entropy(logits: Any) -> Any:
    """Entropy of softmax(logits) per position: [B, T, V] -> [B, T]."""
    logits = logits.astype(jnp.float32)
    logz = jax.nn.logsumexp(logits, axis=-1)
    probs = jnp.exp(logits - logz[..., None])
    return logz - jnp.sum(probs * logits, axis=-1)


def entropy_stats(entropy: Any, mask: Any) -> dict[str, Any]:
    """train/entropy (mean over the completion tokens) and train/entropy_q10."""
    return {"entropy": masked_mean(entropy, mask),
            "entropy_q10": masked_quantile(entropy, mask, ENTROPY_QUANTILE)}


def masked_entropy(logits: Any, mask: Any) -> Any:
    """Mean over unmasked tokens of the entropy of softmax(logits) [B, T, V] -> scalar."""
    return masked_mean(token_entropy(logits), mask)


@function_registry.register_advantage_estimator(ADVANTAGE)
def advantage_fn(rewards: np.ndarray, num_generations: int) -> np.ndarray:
    return group_advantages(rewards, num_generations)
