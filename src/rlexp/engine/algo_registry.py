"""Plug rlexp's maths into Tunix: registered by name, so Tunix's GRPOLearner calls ours.

  policy loss "rlexp"          -> rlexp.algo.losses.policy_loss (every algo.loss family)
  advantage   "rlexp_group"    -> rlexp.algo.advantages.group_advantages
  advantage   "rlexp_<name>"   -> rlexp.algo.advantages.advantages_by_name (algo.advantage)

`AlgoSettings` is Tunix's GRPOConfig carrying our loss's settings (Tunix's own fields filled to
agree, so its logs do); `after_scoring` is rlexp's one hook on each scored batch.

Rollout correction: the loss compares the sampler's per-token log-probs with the trainer's old
ones: Tunix's old-logps pass when num_iterations > 1, else its own forward, which on a rollout's
only update runs the weights the rollout was scored against (optax.MultiSteps changes them only
at the window's end): no extra forward. Off-policy with an engine other than the vanilla
sampler, Tunix's old log-probs would be the engine's own; the trainer's replace them (one
forward without gradient at the rollout temperature, as TRL 1.16 computes its old log-probs
whenever its vLLM correction is on).

Gradient accumulation: Tunix 0.1.7 wraps the optimizer in optax.MultiSteps, which averages the
micro-batch gradients, and each micro-batch loss would divide by its own kept tokens (or rows);
`normalise_over_windows` divides by the window's instead, so micro-batch 1 and micro-batch =
mini-batch give the same update.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, Callable

import flax
import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tunix.rl import common, function_registry, rl_cluster as rl_cluster_lib
from tunix.rl.grpo.grpo_learner import GRPOConfig, TrainExample
from tunix.rl.rollout.vanilla_rollout import VanillaRollout

from rlexp.algo import algorithm
from rlexp.algo import rollout_correction as rc
from rlexp.algo.advantages import advantages_by_name, group_advantages, masked_whiten
from rlexp.algo.choices import KL_ESTIMATORS, LOSS_AGGREGATIONS, TOKEN_LEVEL_ADVANTAGES
from rlexp.algo.losses import (Divisors, LossSettings, kept_counts, kept_mask, masked_mean,
                               masked_quantile, policy_loss, truncated_rows)
from rlexp.config.schema import AlgoConfig

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
    # What rlexp's loss reads (Tunix's fields that mean the same are set from it).
    loss: LossSettings
    # The completion budget in tokens (rollout.max_completion_length): Dr.GRPO's constant and
    # the length at which a completion without EOS counts as truncated. None = padded width.
    budget: int | None = None
    # algo.advantage (REINFORCE++ finishes its advantages over the completion tokens).
    advantage: str = "grpo"
    correction: rc.RolloutCorrection = rc.RolloutCorrection()

    @property
    def ratio_level(self) -> str:
        """The resolved importance-ratio level, beside Tunix's loss_algo label for it."""
        return self.loss.level


def algo_settings(a: AlgoConfig, budget: int | None = None) -> AlgoSettings:
    """`budget`: rollout.max_completion_length (the engine always passes it)."""
    loss = LossSettings.from_algo(a)
    return AlgoSettings(
        loss=loss, budget=budget, advantage=a.advantage,
        correction=rc.RolloutCorrection.from_algo(a), policy_loss_fn=POLICY_LOSS,
        advantage_estimator=advantage_estimator(a),
        loss_algo=algorithm.get(a.name).tunix_loss_algo, num_generations=loss.group_size,
        num_iterations=a.num_iterations, beta=loss.beta, epsilon=loss.epsilon,
        kl_loss_mode=TUNIX_KL_MODE[loss.kl_estimator], loss_agg_mode=TUNIX_LOSS_AGG[loss.loss_agg])


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
    """A training example and its sampler's per-token log-probs [B, T] (NaN where none)."""
    sampler_logps: Any = None


@flax.struct.dataclass(frozen=True)
class WindowedExample(RolloutExample):
    """A micro-batch and its window's divisors (rlexp.algo.losses.Divisors), each [B] (one
    value repeated) so they shard along the batch like every other field."""
    window_tokens: Any = None
    window_rows: Any = None


def truncated(train_example: Any, algo_config: AlgoSettings, eos_id: int) -> Any:
    """[B] rows cut at the budget without EOS, or None when mask_truncated is off."""
    if not algo_config.loss.mask_truncated:
        return None
    return truncated_rows(train_example.completion_ids, train_example.completion_mask, eos_id,
                          algo_config.budget)


# What rlexp changes in a batch Tunix generated and scored: (TrainExample, mode) -> example.
ScoredStep = Callable[[Any, Any], Any]


def after_scoring(learner: Any) -> None:
    """Wrap GRPOLearner._generate_and_compute_advantage (on the instance) so that its scored
    TrainExample goes through whiten_over_tokens, then correct_rollouts (those that apply)."""
    steps = [step for step in (whiten_over_tokens(learner), correct_rollouts(learner))
             if step is not None]
    prepare = learner._generate_and_compute_advantage

    def prepare_then_steps(*args: Any, **kw: Any) -> Any:
        out = prepare(*args, **kw)
        mode = args[1] if len(args) > 1 else kw.get("mode", rl_cluster_lib.Mode.TRAIN)
        for step in steps:
            out = step(out, mode)
        return out

    learner._generate_and_compute_advantage = prepare_then_steps


def whiten_over_tokens(learner: Any) -> ScoredStep | None:
    """REINFORCE++(-baseline): `whitened`; None for the other estimators. Its advantages are
    whitened over the batch's completion tokens, which Tunix's estimator signature (rewards,
    num_generations) cannot see, so they are finished here where the mask is made."""
    return whitened if learner.algo_config.advantage in TOKEN_LEVEL_ADVANTAGES else None


def whitened(example: Any, mode: Any = None) -> Any:
    """The per-row scores as [B, T] advantages whitened over the batch's completion tokens."""
    mask = np.asarray(example.completion_mask)
    adv = masked_whiten(np.asarray(example.advantages), mask)
    return example.replace(advantages=jax.device_put(adv))


def loss_from_logps(per_token_logps: Any, train_example: Any, algo_config: AlgoSettings,
                    eos_id: int = -1, entropy: Any = None) -> tuple[Any, dict[str, Any]]:
    """The part of the registered loss after the forward pass (tested on its own).
    `entropy`: [B, T] per-token entropy (needed by entropy_coef and top_entropy_quantile)."""
    divisors = weights = None
    if isinstance(train_example, WindowedExample) and train_example.window_tokens is not None:
        divisors = Divisors(tokens=jnp.max(train_example.window_tokens),
                            rows=jnp.max(train_example.window_rows))
    mask, sampler = train_example.completion_mask, getattr(train_example, "sampler_logps", None)
    c = algo_config.correction
    if sampler is not None:
        # The trainer's log-probs the rollout is compared with: the old ones, or (on-policy)
        # this forward's, the same weights (see the module docstring).
        old = train_example.old_per_token_logps
        trainer = jax.lax.stop_gradient(per_token_logps if old is None else old)
        if c.enabled:
            weights = rc.importance_weights(trainer, sampler, mask, c)
    loss, aux = policy_loss(per_token_logps, train_example.old_per_token_logps,
                            train_example.ref_per_token_logps, train_example.advantages,
                            train_example.completion_mask, algo_config.loss,
                            truncated(train_example, algo_config, eos_id), algo_config.budget,
                            divisors, entropy, weights)
    if sampler is not None:
        aux.update(rc.logprob_gap(trainer, sampler, mask))
    if weights is not None:
        aux.update(rc.weight_stats(weights, mask, c.mode))
    return loss, aux


def _as(cls: type, example: Any, **changes: Any) -> Any:
    """`example` (a TrainExample) as a `cls` with `changes`: flax dataclasses cannot change type."""
    fields = {f.name: getattr(example, f.name) for f in dataclasses.fields(example)}
    return cls(**{**fields, **changes})


def with_window(examples: list[Any], algo_config: AlgoSettings, eos_id: int
                ) -> list[WindowedExample]:
    """The window's micro-batches, each carrying its kept tokens and kept rows (counted as the
    loss keeps them) over len(examples): the mean of their gradients is the window's."""
    tokens = rows = jnp.zeros((), jnp.float32)
    for ex in examples:
        mask = kept_mask(ex.completion_mask, ex.advantages, truncated(ex, algo_config, eos_id),
                         algo_config.loss)
        counts = kept_counts(mask)
        tokens, rows = tokens + counts.tokens, rows + counts.rows
    tokens, rows = tokens / len(examples), rows / len(examples)
    return [_as(WindowedExample, ex, window_tokens=jnp.full(len(ex.completion_mask), tokens),
                window_rows=jnp.full(len(ex.completion_mask), rows)) for ex in examples]


class WindowQueue:
    """Tunix's training data queue for one accumulation window: holds what _prepare_data puts
    (each [example], num_iterations times) until the None that ends the window, then passes it
    on, windowed, in order: the trainer starts once the window is complete (with split meshes
    it could start on the first: the price of the exact divisor)."""

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
    annotate = functools.partial(with_window, algo_config=learner.algo_config,
                                 eos_id=learner.rl_cluster.rollout.eos_id())

    def prepare_data(*args: Any, data_queue: Any, mode: Any, **kw: Any) -> Any:
        if mode == rl_cluster_lib.Mode.TRAIN:
            data_queue = WindowQueue(data_queue, annotate)
        return prepare(*args, data_queue=data_queue, mode=mode, **kw)

    learner._prepare_data = prepare_data


def on_trainer_mesh(cluster: Any, *arrays: Any) -> list[Any]:
    """The arrays [B, ...] as global arrays of the same shape on the trainer's mesh, rows split
    over its data axes as Tunix splits its log-prob passes' inputs (sharding_utils.shard_input's
    PartitionSpec(*data_sharding_axis); replicated when the rows do not divide evenly)."""
    mesh = cluster.r2m[rl_cluster_lib.Role.ACTOR]
    axis = tuple(cluster.cluster_config.training_config.data_sharding_axis)
    return [rows_on_mesh(x, mesh, axis) for x in arrays]


def rows_on_mesh(x: Any, mesh: jax.sharding.Mesh, axis: tuple[Any, ...]) -> jax.Array:
    """`x` (every row) as a global array of x's own shape split over `axis` of the mesh. Each
    process of a multi-controller run holds the whole rollout (Tunix's sampler returns every row
    to every process); shard_input would read it as the process's share of the rows: a
    [processes x B] array beside the trainer's [B] ones, which fails in the loss."""
    if isinstance(x, jax.Array) and not x.is_fully_addressable:
        return x
    x = np.asarray(x)
    spec = jax.sharding.PartitionSpec(*axis)
    divides = x.ndim >= len(spec) and all(
        x.shape[i] % int(np.prod([mesh.shape[n] for n in (a if isinstance(a, tuple) else (a,))]))
        == 0 for i, a in enumerate(spec) if a is not None)
    sharding = jax.sharding.NamedSharding(mesh, spec if divides else
                                          jax.sharding.PartitionSpec())
    return jax.make_array_from_process_local_data(sharding, x, global_shape=x.shape)


def trainer_logps(cluster: Any, prompt_ids: Any, completion_ids: Any, pad_id: int, eos_id: int,
                  temperature: float, micro: int) -> Any:
    """[B, T] log-probs of the completion tokens under the trainer's current weights, at the
    rollout temperature (the loss's own forward, without gradient), `micro` rows at a time."""
    graphdef, state = nnx.split(cluster.actor_trainer.model)
    prompt_ids, completion_ids = on_trainer_mesh(cluster, prompt_ids, completion_ids)
    n = completion_ids.shape[0]
    with cluster.r2m[rl_cluster_lib.Role.ACTOR]:
        return jnp.concatenate([
            common.compute_per_token_logps(
                graphdef, state, prompt_tokens=prompt_ids[i:i + micro],
                completion_tokens=completion_ids[i:i + micro], pad_id=pad_id, eos_id=eos_id,
                stop_gradient=True, return_logits=False, temperature=temperature)
            for i in range(0, n, micro or n)], axis=0)


def with_sampler_logps(example: Any, sampler: Any, trainer: Any = None) -> RolloutExample:
    """The example as a RolloutExample with the sampler's log-probs (`trainer`: its old ones)."""
    old = {} if trainer is None else {"old_per_token_logps": trainer}
    return _as(RolloutExample, example, sampler_logps=sampler, **old)


def correct_rollouts(learner: Any) -> ScoredStep:
    """The step that hands every training rollout's sampler log-probs to the loss, which logs
    the trainer/sampler gap (and with algo.rollout_correction, corrects it); wraps
    RLCluster.generate (on the instance) to keep the TRAIN output's log-probs for it."""
    c, cluster = learner.algo_config.correction, learner.rl_cluster
    generate = cluster.generate
    # Off the vanilla sampler Tunix's old log-probs are the engine's own (module docstring).
    vanilla = isinstance(cluster.rollout, VanillaRollout)
    kept: list[Any] = []

    def keeping_generate(*args: Any, **kw: Any) -> Any:
        out = generate(*args, **kw)
        if kw.get("mode", rl_cluster_lib.Mode.TRAIN) == rl_cluster_lib.Mode.TRAIN:
            kept.append(out.logprobs)
        return out

    def with_rollout_logps(out: Any, mode: Any) -> Any:
        # the batch's own TRAIN generate call is the latest one kept
        rows = kept[-1] if kept else None
        kept.clear()
        if mode != rl_cluster_lib.Mode.TRAIN:
            return out
        if rows is None:  # the sampler gave none: fine unless a correction needs them
            if c.enabled:
                raise RuntimeError(f"algo.rollout_correction={c.mode} needs the sampler's "
                                   "per-token log-probs, and this rollout engine returned none")
            return out
        [sampler] = on_trainer_mesh(cluster, rc.sampler_logps(rows, out.completion_ids.shape[1]))
        trainer = None
        if out.old_per_token_logps is not None and not vanilla:
            micro = (learner._compute_logps_micro_batch_size or 0) * \
                learner.algo_config.num_generations
            trainer = trainer_logps(cluster, out.prompt_ids, out.completion_ids,
                                    cluster.rollout.pad_id(), cluster.rollout.eos_id(),
                                    learner.algo_config.temperature, micro)
        return with_sampler_logps(out, sampler, trainer)

    cluster.generate = keeping_generate
    return with_rollout_logps


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
    """Entropy of softmax(logits) per position: [B, T, V] -> [B, T]."""
    logits = logits.astype(jnp.float32)
    logz = jax.nn.logsumexp(logits, axis=-1)
    probs = jnp.exp(logits - logz[..., None])
    return logz - jnp.sum(probs * logits, axis=-1)


def masked_entropy(logits: Any, mask: Any) -> Any:
    """Mean over unmasked tokens of the entropy of softmax(logits) [B, T, V] -> scalar."""
    return masked_mean(token_entropy(logits), mask)


@function_registry.register_advantage_estimator(ADVANTAGE)
def advantage_fn(rewards: np.ndarray, num_generations: int) -> np.ndarray:
    return group_advantages(rewards, num_generations)
