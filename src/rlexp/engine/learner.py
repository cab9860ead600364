"""rlexp's learner: Tunix's GRPOLearner and RLCluster as subclasses, and one global step.

RLLearner declares its hooks abstract for subclasses (tunix/rl/rl_learner.py, 0.1.7).
`Learner._generate_and_compute_advantage`, per merged batch of prompts: GRPOLearner samples
(timed by the probe, a TRAIN call's per-token log-probs kept), scores and computes advantages
(algo_registry.advantage_estimator); REINFORCE++ whitens them over the completion tokens; TRAIN
examples get the sampler's log-probs for the loss's trainer/sampler gap and
algo.rollout_correction; the probe records it all. `_prepare_data`: with gradient accumulation,
a window's micro-batches pass through a WindowQueue that gives each the window's divisors
(optax.MultiSteps averages micro-batch gradients, each of which would divide by its own kept
tokens: micro-batch 1 and micro-batch = mini-batch then give the same update).

The trainer's old log-probs for the correction: Tunix's when num_iterations > 1, else the
loss's own forward (a rollout's only update runs the weights it was scored against). Where
Tunix's old log-probs cannot stand (vLLM on TPU; with the correction, a vanilla copy that lags
the trainer: RolloutBackend.old_logps_from_trainer) the trainer's replace them (one forward
without gradient at the rollout temperature, as TRL 1.16 does with its vLLM correction).

Off-policy (rollout.off_policy_steps = k > 0; verl's one-step-off trainer, ray_trainer.py
412-516 at b178a3cd, and MaxText's rl.off_policy_steps): StepRunner samples step n+k's batch
beside step n's update, with the sampler's weights then (at most k updates old), and the Cluster
hands it to Tunix's data preparation at step n+k. With separate trainer and sampler meshes
(RLLearner.can_enable_async_rollout, Tunix's own test) the sampling runs on a thread; on one
mesh it runs before the update, sequentially. Without algo.rollout_correction the loss's ratio is
taken against the behaviour log-probs recorded at sampling (verl's default bypass mode); with it,
against the trainer's, and the correction weights pi_old / pi_sampler carry the staleness
(NeMo-RL's async GRPO). Nothing is in flight between steps: a step ends once its batches ahead
are sampled, so evaluation, checkpoints and a kill see none running; a resumed run samples them
again with the restored weights (Tunix main's agentic learner does the same).
"""

from __future__ import annotations

import collections
import dataclasses
import functools
import math
import time
from concurrent import futures
from typing import Any, Callable, Sequence
from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
from flax import nnx
from tunix.rl import common, rl_cluster as rl_cluster_lib, trainer as rl_trainer
from tunix.rl.grpo.grpo_learner import GRPOLearner

from rlexp.algo import rollout_correction as rc
from rlexp.algo.choices import TOKEN_LEVEL_ADVANTAGES
from rlexp.algo.losses import runtime_numbers
from rlexp.config.schema import Config
from rlexp.engine import algo_registry as registry
from rlexp.engine.probes import StepProbe

Mode = rl_cluster_lib.Mode


class ActorTrainer(rl_trainer.Trainer):
    """Tunix's RL trainer handing each update's loss, grad norm and aux to the probe."""

    def __init__(self, *args: Any, probe: StepProbe, **kw: Any):
        super().__init__(*args, **kw)
        self.probe = probe

    def _post_process_train_step(self, aux: Any) -> None:
        super()._post_process_train_step(aux)
        buf = self._buffered_train_metrics
        self.probe.record_update(buf.losses[-1], buf.additional_metrics["grad_norm"][0][-1],
                                 {k: aux[k] for k in registry.AUX_KEYS if k in aux})


class Cluster(rl_cluster_lib.RLCluster):
    """Tunix's RLCluster timing sampler calls, keeping a TRAIN call's log-probs for the learner."""

    def __init__(self, *, probe: StepProbe, old_logps_from_trainer: bool, **kw: Any):
        self.probe = probe
        # RolloutBackend.old_logps_from_trainer: else the learner scores the old log-probs.
        self.old_logps_from_trainer = old_logps_from_trainer
        self.kept_logprobs: Any = None
        # Batches sampled before their step, oldest first (rlexp.engine.learner's docstring).
        self.ahead: collections.deque[Ahead] = collections.deque()
        super().__init__(**kw)

    def _init_cluster(self) -> None:
        # RLCluster builds its trainers from its module's rl_trainer.Trainer, with no argument
        # for the class: ours while it builds (tunix_names.PATCHES).
        with mock.patch.object(rl_trainer, "Trainer",
                               functools.partial(ActorTrainer, probe=self.probe)):
            super()._init_cluster()

    def generate(self, prompts: Any, mode: Any = Mode.TRAIN, **kw: Any) -> Any:
        start = time.perf_counter()
        if mode == Mode.TRAIN and self.ahead:
            out = self.ahead[0].take(list(prompts))
            if self.ahead[0].taken == len(self.ahead[0].prompts):
                self.ahead.popleft()
        else:
            out = super().generate(prompts, mode=mode, **kw)
        if mode == Mode.TRAIN:
            self.kept_logprobs = out.logprobs
        self.probe.record_generate(time.perf_counter() - start, out, self.rollout.pad_id())
        return out

    def sample(self, prompts: list[str], rows: int) -> tuple[Any, float]:
        """TRAIN rollouts of `prompts`, `rows` per sampler call, not recorded by the probe (the
        step that trains on them does), and the seconds they took."""
        start = time.perf_counter()
        out = super().generate(prompts, mode=Mode.TRAIN, micro_batch_size=rows)
        return out, time.perf_counter() - start

    def take_logprobs(self) -> Any:
        """The latest TRAIN call's per-token log-probs (None: none kept), then forgotten."""
        rows, self.kept_logprobs = self.kept_logprobs, None
        return rows

    def copy_weights(self) -> None:
        """The trainer's weights to the sampler copy, the step count unmoved: Tunix's
        sync_weights counts a step (it ends a full batch in RLLearner), which a copy out of
        the step schedule (a resume, an evaluation) is not."""
        steps = self.global_steps
        self.sync_weights()
        self.global_steps = steps


@dataclasses.dataclass
class Ahead:
    """A batch's rollouts sampled before its step, handed out in Tunix's calls' slices."""

    # Every row's prompt (each repeated num_generations times, as Tunix repeats them).
    prompts: list[str]
    # Updates in the weights that sampled it (global steps done then).
    version: int
    # -> (RolloutOutput, sampler seconds)
    future: futures.Future
    taken: int = 0

    def take(self, prompts: list[str]) -> Any:
        """The next len(prompts) rows, which must be these prompts' (Tunix's order)."""
        out, _ = self.future.result()
        a, b = self.taken, self.taken + len(prompts)
        if self.prompts[a:b] != prompts:
            raise RuntimeError(f"off-policy: rows {a}-{b} sampled ahead are not the prompts "
                               "Tunix asks for")
        self.taken = b
        return dataclasses.replace(out, **{f.name: getattr(out, f.name)[a:b]
                                           for f in dataclasses.fields(out)
                                           if getattr(out, f.name) is not None})


def as_behaviour(example: Any, behaviour: Any, numbers: Any = None) -> Any:
    """The example whose old log-probs are the behaviour policy's, recorded at sampling
    (positions with none, NaN, lie outside the mask: 0): off-policy, the loss's ratio
    pi_theta / pi_behaviour (verl's one-step-off bypass mode)."""
    return registry.with_sampler_logps(example, None, jnp.nan_to_num(behaviour, nan=0.0), numbers)


class Learner(GRPOLearner):
    """GRPOLearner with rlexp's steps after sampling and in data preparation (module docstring)."""

    rl_cluster: Cluster

    def __init__(self, cfg: Config, rl_cluster: Cluster,
                 reward_fns: Sequence[Callable[..., list[float]]]):
        algo_config = registry.algo_settings(cfg.algo, budget=cfg.rollout.max_completion_length)
        super().__init__(rl_cluster=rl_cluster, algo_config=algo_config,
                         reward_fns=list(reward_fns))
        self.probe = rl_cluster.probe
        # Tunix would log aux["pg_clipfrac"], which our loss does not produce.
        rl_cluster.actor_trainer.with_rl_metrics_to_log({})
        self.whiten = algo_config.loss.advantage in TOKEN_LEVEL_ADVANTAGES
        self.off_policy = cfg.rollout.off_policy_steps > 0
        steps = self._training_config.get_with_default("gradient_accumulation_steps", 1)
        self.windowed = bool(steps) and steps > 1
        self.with_window = functools.partial(registry.with_window, algo_config=algo_config,
                                             eos_id=rl_cluster.rollout.eos_id())
        self.loss_numbers = runtime_numbers(algo_config.loss)

    def _generate_and_compute_advantage(self, training_input: Any, mode: Any = Mode.TRAIN) -> Any:
        start = time.perf_counter()
        example = super()._generate_and_compute_advantage(training_input, mode)
        if self.whiten:
            example = registry.whitened(example)
        example = self.with_sampler_logps(example, mode)
        self.probe.record_prepare(time.perf_counter() - start, training_input.get("prompts", ()),
                                  example.advantages)
        return example

    def with_sampler_logps(self, example: Any, mode: Any) -> Any:
        """A TRAIN example as a RolloutExample with the sampler's log-probs (and, where Tunix's
        old log-probs cannot stand as the loss's: RolloutBackend.old_logps_from_trainer, the
        trainer's as its old ones) and the loss's runtime numbers."""
        rows, c = self.rl_cluster.take_logprobs(), self.algo_config.correction
        if mode != Mode.TRAIN:
            return example
        cluster = self.rl_cluster
        [numbers] = on_trainer_mesh(cluster, np.tile(self.loss_numbers,
                                                      (example.completion_ids.shape[0], 1)))
        if rows is None:  # the sampler gave none: fine unless a correction needs them
            if c.enabled:
                raise RuntimeError(f"algo.rollout_correction={c.mode} needs the sampler's "
                                   "per-token log-probs, and this rollout engine returned none")
            # All unknown (NaN), not absent: the update's inputs keep one structure, so steps
            # with and without log-probs (rollout.logprob_gap_every) share one compiled step.
            [unknown] = on_trainer_mesh(cluster, np.full(example.completion_ids.shape, np.nan,
                                                         np.float32))
            return registry.with_sampler_logps(example, unknown, numbers=numbers)
        [sampler] = on_trainer_mesh(cluster,
                                    rc.sampler_logps(rows, example.completion_ids.shape[1]))
        if self.off_policy and not c.enabled:
            return as_behaviour(example, sampler, numbers)
        trainer = None
        if example.old_per_token_logps is not None and not cluster.old_logps_from_trainer:
            micro = (self._compute_logps_micro_batch_size or 0) * self.algo_config.num_generations
            trainer = trainer_logps(cluster, example.prompt_ids, example.completion_ids,
                                    cluster.rollout.pad_id(), cluster.rollout.eos_id(),
                                    self.algo_config.temperature, micro)
        return registry.with_sampler_logps(example, sampler, trainer, numbers)

    def _prepare_data(self, *args: Any, data_queue: Any, mode: Any = Mode.TRAIN, **kw: Any) -> None:
        if self.windowed and mode == Mode.TRAIN:
            data_queue = WindowQueue(data_queue, self.with_window)
        return super()._prepare_data(*args, data_queue=data_queue, mode=mode, **kw)


class WindowQueue:
    """Tunix's data queue holding a window's items until the None that ends it (exact divisors)."""

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


def on_trainer_mesh(cluster: Any, *arrays: Any) -> list[Any]:
    """The [B, ...] arrays on the trainer's mesh, rows split as sharding_utils.shard_input does."""
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
    """[B, T] completion log-probs under the trainer's weights at the rollout temperature."""
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


class StepRunner:
    """One iteration of RLLearner.train (tunix/rl/rl_learner.py, 0.1.7): GRPOLearner.train()
    owns the whole loop and closes the cluster at the end (writing Tunix's metrics, clearing
    jax.monitoring listeners); rlexp's loop stops after every step to evaluate, log and save."""

    def __init__(self, learner: GRPOLearner, batch_size: int, sync_every: int = 1,
                 rollout: Any = None, off_policy_steps: int = 0):
        self.learner = learner
        # Copy the trainer's weights to the sampler after every sync_every-th global step
        # (rollout.sync_every; MaxText's inference_rollouts), when the two hold separate copies.
        self.sync_every = sync_every
        # The rollout backend (rlexp.engine.rollout): its sampling keys and log-prob cadence.
        self.rollout = rollout
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
        # Steps whose batch is sampled ahead (rollout.off_policy_steps; module docstring).
        self.ahead_steps = off_policy_steps
        # Separate meshes: sampling beside the update on a thread of its own (Tunix samples on
        # its executor the same way, RLLearner.can_enable_async_rollout; its one worker runs
        # Tunix's own data preparation during the update, so it cannot take ours).
        self.pool = (futures.ThreadPoolExecutor(1, "rlexp-sampler")
                     if off_policy_steps and learner.can_enable_async_rollout else None)
        # Steps run by this process, and updates in the sampler's weights (set at the first
        # step: a resumed run's sampler holds the restored weights).
        self.calls = 0
        self.last_step: int | None = None
        self.sampler_version: int | None = None
        # Of the latest step: steps between its batch's sampling weights and the trainer's
        # (whole steps: a step's later mini-batches on a split copy lag more, unlogged), and
        # the sampler seconds of the batches sampled during it.
        self.staleness = 0
        self.sampled_s = 0.0

    def __call__(self, batch: dict[str, Any], step: int = 0, key: Any = None,
                 ahead: Sequence[tuple[dict[str, Any], Any]] = ()) -> None:
        """Global step `step` (1-based) on `batch` sampled with `key`; `ahead`: the next
        off_policy_steps steps' (batch, key), fewer near the end."""
        L = self.learner
        self.calls += 1
        if self.rollout is not None:
            L.rl_cluster.cluster_config.rollout_config[Mode.TRAIN].return_logprobs = (
                self.rollout.logprobs_at(step))
        if self.sampler_version is None or not L.should_sync_weights:
            self.sampler_version = step - 1  # the restored weights, or the trainer's own
        if self.ahead_steps:
            self.sample_ahead(step, [(batch, key), *ahead])
        else:  # sampled in the step, by a sampler copy that lags between syncs (sync_every)
            self.staleness = step - 1 - self.sampler_version
        it = iter([batch])
        if self.micro != self.full:
            it = L._create_micro_batch_iterator(it, self.micro)
        L._run_global_step(self.full, self.mini, self.service, self.grad_acc, it, None, False)
        if self.pool is not None:  # all sampled before the weights move on
            waited = time.perf_counter()
            for ahead in L.rl_cluster.ahead:
                ahead.future.result()
            L.probe.rollout_s += time.perf_counter() - waited
        if L.should_sync_weights and (L.rl_cluster.global_steps + 1) % self.sync_every == 0:
            L.rl_cluster.sync_weights()  # also counts the step
            self.sampler_version = step
        else:
            L.rl_cluster.global_steps += 1
        self.last_step = step

    @property
    def samples_behind(self) -> bool:
        """Whether a batch can be sampled with weights behind the trainer's: sampled ahead
        (rollout.off_policy_steps), or by a sampler copy synced every rollout.sync_every > 1."""
        return bool(self.ahead_steps) or (self.learner.should_sync_weights and self.sync_every > 1)

    def sync_for_eval(self) -> None:
        """An evaluation scores the trainer's weights: a sampler copy behind them
        (rollout.sync_every > 1) gets them first, the schedule of later syncs unmoved. Nothing
        is sampled meanwhile: a step waits for its batches sampled ahead before it ends."""
        L = self.learner
        if not L.should_sync_weights or self.last_step in (None, self.sampler_version):
            return
        L.rl_cluster.copy_weights()
        self.sampler_version = self.last_step

    def sample_ahead(self, step: int, batches: list[tuple[dict[str, Any], Any]]) -> None:
        """Queue the rollouts of steps step..step+k that are not yet: this step's now (the
        first step, or the first after a resume), the later ones beside the update."""
        L, cluster = self.learner, self.learner.rl_cluster
        self.sampled_s = 0.0
        for i, (batch, key) in enumerate(batches[len(cluster.ahead):], len(cluster.ahead)):
            prompts = [p for p in batch["prompts"]
                       for _ in range(L.algo_config.num_generations)]

            def sample(prompts: list[str] = prompts, key: Any = key) -> tuple[Any, float]:
                self.rollout.keys.reset(key)
                out, seconds = cluster.sample(prompts, self.rollout_rows)
                self.sampled_s += seconds
                return out, seconds

            if i and self.pool is not None:
                future = self.pool.submit(sample)
            else:  # this step's batch, or one mesh: before the update moves the weights
                future = futures.Future()
                future.set_result(sample())
                L.probe.rollout_s += future.result()[1]
            cluster.ahead.append(Ahead(prompts, self.sampler_version, future))
        self.staleness = step - 1 - cluster.ahead[0].version
