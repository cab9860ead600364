"""Typed config -> Tunix objects: optimizer, learning-rate schedule, the cluster.

No Tunix metrics backend is registered (tunix/sft/metrics_logger.py, 0.1.7): it is a global
jax.monitoring listener whose close() clears every listener.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax
import numpy as np
import optax
from tunix.rl import rl_cluster as rl_cluster_lib

from rlexp.config.rules import batch_sizes
from rlexp.config.schema import Config
from rlexp.engine import lr_schedule
from rlexp.engine.learner import Cluster
from rlexp.engine.probes import StepProbe
from rlexp.engine.rollout import RolloutBackend
from rlexp.planning.memory import rollout_micro_prompts

Mode = rl_cluster_lib.Mode
Role = rl_cluster_lib.Role


def updates_per_step(cfg: Config) -> int:
    """Optimizer updates one global step makes: mini-batches x num_iterations."""
    return cfg.train.batch_size // batch_sizes(cfg)[0] * cfg.algo.num_iterations


def schedule_numbers(cfg: Config) -> dict[str, np.float32]:
    """train.*'s schedule as the optimizer state's numbers (rlexp.engine.lr_schedule), counted
    in optimizer updates."""
    t = cfg.train
    total = max(t.steps * updates_per_step(cfg), 1)
    warmup = min(t.warmup_steps * updates_per_step(cfg), total - 1)
    return lr_schedule.schedule_numbers(t.lr_schedule, t.learning_rate, t.end_learning_rate,
                                        warmup, total)


def host_lr_schedule(cfg: Config) -> Callable[[int], float]:
    """The LR schedule as a host table: the loop's per-step read is a lookup, not a sync."""

    kind, numbers = cfg.train.lr_schedule, schedule_numbers(cfg)
    total = cfg.train.steps * updates_per_step(cfg)

    @functools.cache
    def table() -> np.ndarray:
        # this process's own CPU device: jax.devices("cpu")[0] is process 0's in a
        # multi-controller run, which another process cannot compute on or read
        with jax.default_device(jax.local_devices(backend="cpu")[0]):
            value = jax.vmap(functools.partial(lr_schedule.schedule_value, kind), (0, None))
            return np.asarray(value(np.arange(total + 1, dtype=np.int32), numbers))

    return lambda count: float(table()[min(int(count), total)])


def optimizer(cfg: Config) -> optax.GradientTransformation:
    """AdamW (b1 0.9, b2 0.99) after global-norm clipping; the schedule's numbers are state,
    so a learning-rate or length sweep shares one compiled train step."""
    t = cfg.train
    adam = lr_schedule.adamw(t.lr_schedule, schedule_numbers(cfg), b1=0.9, b2=0.99,
                             weight_decay=t.weight_decay)
    return optax.chain(optax.clip_by_global_norm(t.grad_clip), adam) if t.grad_clip > 0 else adam


def make_cluster(cfg: Config, actor: Any, reference: Any | None, tokenizer: Any,
                 meshes: dict[str, Any], probe: StepProbe, rollout: RolloutBackend) -> Cluster:
    mini, micro = batch_sizes(cfg)
    # Prompts per sampler call and reference/old log-prob pass: one place decides them.
    rollout_micro = rollout_micro_prompts(cfg)
    training = rl_cluster_lib.RLTrainingConfig(
        actor_optimizer=optimizer(cfg), eval_every_n_steps=1, max_steps=None,
        mini_batch_size=mini, train_micro_batch_size=micro,
        rollout_micro_batch_size=rollout_micro, compute_logps_micro_batch_size=rollout_micro,
        metrics_logging_options=None, checkpoint_root_directory=None)
    cluster_config = rl_cluster_lib.ClusterConfig(
        role_to_mesh={Role.ACTOR: meshes["trainer"], Role.REFERENCE: meshes["trainer"],
                      Role.ROLLOUT: meshes["rollout"]},
        # configs first: they check that the engine's packages are installed
        rollout_config=rollout.configs(), rollout_engine=rollout.engine(),
        offload_to_cpu=False, training_config=training)
    return Cluster(actor=actor, reference=reference, tokenizer=tokenizer,
                   cluster_config=cluster_config, probe=probe,
                   old_logps_from_trainer=rollout.old_logps_from_trainer)
