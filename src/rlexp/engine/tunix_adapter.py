"""Typed config -> Tunix objects: optimizer, rollout configs, RLCluster, GRPOLearner.

Tunix 0.1.7 traps handled here (measured; tunix/rl/rollout/vanilla_rollout.py,
tunix/generate/sampler.py, tunix/sft/metrics_logger.py): (1) the vanilla rollout reuses one
PRNG key on every call, so the engine sets a fresh key per call; (2) RematConfig.DECODER
crashes in the sampler, so it is never used (training-only remat: engine/tunix_patches.py);
(3) no metrics backend is registered: Tunix's backend is a global jax.monitoring listener whose
close() clears every listener; (4) Tunix's KL default is k1 (kl_loss_mode="kl"), so rlexp
names its estimator explicitly; (5) the vanilla rollout computes the old log-probs
(num_iterations > 1) at temperature 1 while the loss uses the sampling temperature, so the
first update's ratio is not 1 unless temperature = 1: we pass the temperature.

Rollout cost that is Tunix's, not rlexp's (0.1.7, tunix/generate/sampler.py): one row that runs
to max_completion_length keeps the whole batch decoding, the sampler detokenizes row by row on
the host and the learner pads every completion in Python.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from typing import Any, Callable, Sequence

import jax
import numpy as np
import optax
from tunix.rl import common, rl_cluster as rl_cluster_lib
from tunix.rl.grpo.grpo_learner import GRPOLearner
from tunix.rl.rollout import base_rollout
from tunix.rl.rollout.vanilla_rollout import VanillaRollout

from rlexp.config.rules import batch_sizes
from rlexp.config.schema import Config
from rlexp.engine import algo_registry as registry
from rlexp.engine.vllm_rollout import (make_rollout_config, on_tunix_engine, request_seed,
                                       sampling_fields, seed_rows)
from rlexp.planning.memory import rollout_micro_prompts

Mode = rl_cluster_lib.Mode
Role = rl_cluster_lib.Role


def updates_per_step(cfg: Config) -> int:
    """Optimizer updates one global step makes: mini-batches x num_iterations."""
    return cfg.train.batch_size // batch_sizes(cfg)[0] * cfg.algo.num_iterations


def lr_schedule(cfg: Config) -> optax.Schedule:
    """Learning rate as a function of the optimizer update count."""
    t = cfg.train
    total = max(t.steps * updates_per_step(cfg), 1)
    if t.lr_schedule == "constant":
        return optax.constant_schedule(t.learning_rate)
    if t.lr_schedule == "cosine":
        return optax.cosine_decay_schedule(t.learning_rate, total,
                                           alpha=t.end_learning_rate / t.learning_rate)
    warmup = min(t.warmup_steps * updates_per_step(cfg), total - 1)
    if t.lr_schedule == "linear":
        # learning_rate -> end_learning_rate in a straight line after the warm-up (EasyDeL's
        # LINEAR scheduler; optax.linear_schedule), reached at the last update.
        decay = optax.linear_schedule(t.learning_rate, t.end_learning_rate, total - warmup)
        if warmup == 0:
            return decay
        return optax.join_schedules([optax.linear_schedule(0.0, t.learning_rate, warmup), decay],
                                    [warmup])
    return optax.warmup_cosine_decay_schedule(0.0, t.learning_rate, warmup, total,
                                              end_value=t.end_learning_rate)


def host_lr_schedule(cfg: Config) -> Callable[[int], float]:
    """The learning-rate schedule as host floats: evaluated for every update count once, so
    the loop's per-step read is a table lookup, not a device computation and sync."""
    schedule, total = lr_schedule(cfg), cfg.train.steps * updates_per_step(cfg)

    @functools.cache
    def table() -> np.ndarray:
        # this process's own CPU device: jax.devices("cpu")[0] is process 0's in a
        # multi-controller run, which another process cannot compute on or read
        with jax.default_device(jax.local_devices(backend="cpu")[0]):
            return np.asarray(jax.vmap(schedule)(np.arange(total + 1)))

    return lambda count: float(table()[min(int(count), total)])


def optimizer(cfg: Config) -> optax.GradientTransformation:
    t = cfg.train
    adam = optax.adamw(lr_schedule(cfg), b1=0.9, b2=0.99, weight_decay=t.weight_decay)
    return optax.chain(optax.clip_by_global_norm(t.grad_clip), adam) if t.grad_clip > 0 else adam


def rollout_configs(cfg: Config) -> dict[Any, base_rollout.RolloutConfig]:
    """TRAIN samples with rollout.*; EVAL is re-set per call (eval_sampling). TRAIN asks for the
    sampler's per-token log-probs, whichever engine: the trainer/sampler gap is logged every
    step and algo.rollout_correction needs them. Their cost on the vanilla sampler
    (bench/overhead.py --ab-no-sampler-logprobs, the default tiny run): nothing measurable on
    a 2-core CPU (0.6864 CPU s/step without them vs 0.6787 with, 3 alternating repeats), but
    0.0339 vs 0.0489 s/step on an H100 (30 steps), where rlexp without them runs at 0.975 of
    bare Tunix's step and with them at 1.41: most of it in the decode loop (0.0279 vs 0.0199
    s/step in the sampler, --trace)."""
    r = cfg.rollout
    if r.name == "vllm":
        return {Mode.TRAIN: dataclasses.replace(make_rollout_config(cfg), return_logprobs=True),
                Mode.EVAL: make_rollout_config(cfg, temperature=cfg.eval.temperature)}
    # Tunix's sampler is greedy when top_p is None: sampling needs top_p (1.0 = off).
    # Its log-probs are log_softmax(logits / temperature) over the whole vocabulary
    # (tunix/generate/sampler.py sample_top_p), as the trainer's forward computes them;
    # EVAL asks for them too, so that evaluation's sampled pass reuses the training
    # decode loop's compilation (the log-prob buffer is part of the loop's state).
    return {mode: base_rollout.RolloutConfig(**sampling_fields(r, temp), return_logprobs=True)
            for mode, temp in ((Mode.TRAIN, r.temperature), (Mode.EVAL, cfg.eval.temperature))}


def eval_sampling(cfg: Config, greedy: bool) -> dict[str, Any]:
    """RolloutConfig fields an evaluation call sets: greedy, or sampled at eval.temperature.
    Tunix's vanilla sampler decodes greedily when top_p is None, whatever the temperature;
    Tunix's VllmSampler skips a None top_p, and vLLM is greedy at temperature 0
    (SamplingParams: "Zero means greedy sampling")."""
    top_p = 1.0 if cfg.rollout.top_p is None else cfg.rollout.top_p
    if cfg.rollout.name == "vllm":
        return {"temperature": 0.0 if greedy else cfg.eval.temperature, "top_p": top_p}
    return {"top_p": None} if greedy else {"top_p": top_p, "temperature": cfg.eval.temperature}


def make_cluster(cfg: Config, actor: Any, reference: Any | None, tokenizer: Any,
                 meshes: dict[str, Any]) -> rl_cluster_lib.RLCluster:
    mini, micro = batch_sizes(cfg)
    # Prompts per sampler call and reference/old log-prob pass: one place decides them.
    rollout_micro = rollout_micro_prompts(cfg)
    training = rl_cluster_lib.RLTrainingConfig(
        actor_optimizer=optimizer(cfg), eval_every_n_steps=1, max_steps=None,
        mini_batch_size=mini, train_micro_batch_size=micro,
        rollout_micro_batch_size=rollout_micro, compute_logps_micro_batch_size=rollout_micro,
        metrics_logging_options=None, checkpoint_root_directory=None)
    # rollout=vllm on CPU/GPU: rlexp's VllmRollout, bound to the config (imported here: vllm)
    engine: Any = cfg.rollout.name
    if engine == "vllm" and not on_tunix_engine(cfg):
        from rlexp.engine.vllm_engine import TorchVllmRollout

        engine = functools.partial(TorchVllmRollout, cfg=cfg)
    cluster_config = rl_cluster_lib.ClusterConfig(
        role_to_mesh={Role.ACTOR: meshes["trainer"], Role.REFERENCE: meshes["trainer"],
                      Role.ROLLOUT: meshes["rollout"]},
        rollout_engine=engine, offload_to_cpu=False,
        training_config=training, rollout_config=rollout_configs(cfg))
    cluster = rl_cluster_lib.RLCluster(actor=actor, reference=reference, tokenizer=tokenizer,
                                       cluster_config=cluster_config)
    if cfg.rollout.name == "vanilla":
        _old_logps_at_temperature(cluster, cfg.rollout.temperature)
        memoize_prompt_encoding(cluster)
    elif not on_tunix_engine(cfg):
        # One seed per prompt (vllm_rollout's docstring, Seeds), through the public `sampler`.
        seed_rows(cluster.rollout.sampler.llm)
    return cluster


class SamplingKeys:
    """A fresh PRNG key for every sampler call (trap 1): the sampler donates RolloutConfig.seed
    with the sampling state, so one key per step would repeat the same noise in every
    micro-batch and crash on the second (deleted buffer). Keys are fold_in(base, n) for the
    n-th call since `reset(base)`: a pure function of (seed, step, call)."""

    def __init__(self) -> None:
        self.reset(None)

    def reset(self, base: Any) -> None:
        self.base, self.calls = base, 0

    def next(self) -> Any:
        self.calls += 1
        return jax.random.fold_in(self.base, self.calls)

    def attach(self, cluster: rl_cluster_lib.RLCluster) -> None:
        """Every rollout.generate call gets the next key: as a JAX key for the vanilla
        sampler, as the int (or None on TPU) vLLM takes otherwise (vllm_rollout.request_seed)."""
        rollout = cluster.rollout
        generate = rollout.generate
        vanilla = isinstance(rollout, VanillaRollout)

        def keyed_generate(prompts: Any, rollout_config: Any, **kw: Any) -> Any:
            key = self.next()
            seed = key if vanilla else request_seed(rollout_config, key)
            return generate(prompts, dataclasses.replace(rollout_config, seed=seed), **kw)

        rollout.generate = keyed_generate


def memoize_prompt_encoding(cluster: rl_cluster_lib.RLCluster, limit: int = 65536) -> None:
    """The vanilla sampler tokenizes every prompt string it is given, and GRPO hands it each
    prompt num_generations times (and evaluation the same prompts every time): remember the
    ids of a string (Tunix copies them before adding BOS, so sharing the list is safe)."""
    tok = cluster.rollout._sampler.tokenizer
    encode = tok.encode
    cached = functools.lru_cache(maxsize=limit)(encode)

    def cached_encode(text: str, **kw: Any) -> Any:
        if kw or not isinstance(text, str):
            return encode(text, **kw)
        return cached(text)

    tok.encode = cached_encode


def _old_logps_at_temperature(cluster: rl_cluster_lib.RLCluster, temperature: float) -> None:
    """Trap 5: make the vanilla rollout's old log-probs use the sampling temperature."""
    rollout = cluster.rollout

    def get_per_token_logps(prompt_tokens: Any, completion_tokens: Any) -> Any:
        graphdef, state = rollout._sampler.model_def_and_state()
        return common.compute_per_token_logps(
            graphdef, state, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            pad_id=rollout.pad_id(), eos_id=rollout.eos_id(), stop_gradient=True,
            return_logits=False, temperature=temperature)

    rollout.get_per_token_logps = get_per_token_logps


def make_learner(cfg: Config, cluster: rl_cluster_lib.RLCluster,
                 reward_fns: Sequence[Callable[..., list[float]]]) -> GRPOLearner:
    settings = registry.algo_settings(cfg.algo, budget=cfg.rollout.max_completion_length)
    learner = GRPOLearner(rl_cluster=cluster, algo_config=settings, reward_fns=list(reward_fns))
    registry.normalise_over_windows(learner)
    registry.after_scoring(learner)
    return learner


class StepRunner:
    """One iteration of RLLearner.train (tunix/rl/rl_learner.py, 0.1.7): GRPOLearner.train()
    owns the whole loop and closes the cluster at the end (writing Tunix's metrics, clearing
    jax.monitoring listeners); rlexp's loop stops after every step to evaluate, log and save."""

    def __init__(self, learner: GRPOLearner, batch_size: int, sync_every: int = 1):
        self.learner = learner
        # Copy the trainer's weights to the sampler after every sync_every-th global step
        # (rollout.sync_every; MaxText's inference_rollouts), when the two hold separate copies.
        self.sync_every = sync_every
        tc = learner._training_config
        self.full = batch_size
        self.mini = tc.mini_batch_size or batch_size
        self.micro = tc.train_micro_batch_size or self.mini
        learner._rollout_micro_batch_size = learner._rollout_micro_batch_size or self.micro
        learner._compute_logps_micro_batch_size = (learner._compute_logps_micro_batch_size
                                                   or self.micro)
        self.grad_acc = tc.get_with_default("gradient_accumulation_steps", 1)
        self.service = math.lcm(learner._rollout_micro_batch_size,
                                learner._compute_logps_micro_batch_size)
        # Rows per sampler call: Tunix merges micro-batches up to the service size, never
        # past a mini-batch (it stops after one mini-batch's micro-batches).
        self.rollout_rows = (min(learner._rollout_micro_batch_size, self.mini)
                             * learner.algo_config.num_generations)

    def __call__(self, batch: dict[str, Any]) -> None:
        L = self.learner
        it = iter([batch])
        if self.micro != self.full:
            it = L._create_micro_batch_iterator(it, self.micro)
        L._run_global_step(self.full, self.mini, self.service, self.grad_acc, it, None, False)
        if L.should_sync_weights and (L.rl_cluster.global_steps + 1) % self.sync_every == 0:
            L.rl_cluster.sync_weights()  # also counts the step
        else:
            L.rl_cluster.global_steps += 1
