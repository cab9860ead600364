"""Rollout backends, their engine half: what RLCluster is given for a rollout engine.

One RolloutBackend subclass per engine, named by its Tunix-free half's `engine`
(rlexp.config.rollouts.RolloutSpec): vanilla (Tunix's sampler), vllm (vLLM's torch build,
CPU/GPU: vllm_engine over vLLM's LLM, vllm_parts without vllm), vllm_tpu (Tunix's VllmRollout
over tpu-inference). A backend gives the cluster its rollout configs and engine (a Tunix name,
or a BaseRollout subclass taking per-call keys and syncing weights its own way), and evaluation
its sampling fields.
"""

from __future__ import annotations

import abc
from typing import Any, Callable

import jax
from tunix.rl.rollout import base_rollout

from rlexp.base.errors import UserError
from rlexp.base.plugins import resolve
from rlexp.config.rollouts import RolloutSpec, rollout_spec
from rlexp.config.schema import Config, RolloutConfig


class SamplingKeys:
    """fold_in(base, n) for the n-th sampler call since `reset(base)`: Tunix 0.1.7 reuses one key
    and donates it, so a key per step repeats noise and crashes on micro-batch 2."""

    def __init__(self) -> None:
        self.reset(None)

    def reset(self, base: Any) -> None:
        self.base, self.calls = base, 0

    def next(self) -> Any:
        self.calls += 1
        return jax.random.fold_in(self.base, self.calls)


def sampling_fields(r: RolloutConfig, temperature: float) -> dict[str, Any]:
    """The fields of Tunix's RolloutConfig that every rollout engine sets from rollout.*."""
    return {"max_tokens_to_generate": r.max_completion_length, "temperature": temperature,
            "top_p": 1.0 if r.top_p is None else r.top_p, "top_k": r.top_k,
            "max_prompt_length": r.max_prompt_length, "kv_cache_size": r.kv_cache_size}


class RolloutBackend(abc.ABC):
    """A rollout backend's engine half (its spec: the Tunix-free half)."""

    # Whether Tunix's old log-probs (num_iterations > 1) are the trainer's own forward (the
    # vanilla sampler's while its copy is current, vLLM's on CPU and GPU); where not, the
    # learner replaces them with the trainer's (rlexp.engine.learner).
    old_logps_from_trainer: bool = False

    def __init__(self, cfg: Config, spec: RolloutSpec):
        self.cfg, self.spec = cfg, spec
        # The keys of the sampler calls, reset by the loop at every step and evaluation.
        self.keys = SamplingKeys()

    @abc.abstractmethod
    def configs(self) -> dict[Any, base_rollout.RolloutConfig]:
        """ClusterConfig.rollout_config: TRAIN samples with rollout.* (its return_logprobs: the
        `logprobs_every_step`, re-set per step by logprobs_at), EVAL is re-set per call."""

    @property
    def logprobs_every_step(self) -> bool:
        """Whether every TRAIN call needs the sampler's per-token log-probs: the correction's
        weights, or the off-policy loss's behaviour log-probs (rlexp.engine.learner)."""
        return self.cfg.algo.rollout_correction != "none" or self.cfg.rollout.off_policy_steps > 0

    def logprobs_at(self, step: int) -> bool:
        """Whether global step `step` (1-based) asks the sampler for them: every step when used,
        else step 1 and every rollout.logprob_gap_every-th for rollout/logprob_diff. Requested
        every step they cost 1.38x bare Tunix's step on an H100 (0.975x without)."""
        every = self.cfg.rollout.logprob_gap_every
        return self.logprobs_every_step or step == 1 or bool(every) and step % every == 0

    @abc.abstractmethod
    def eval_sampling(self, greedy: bool) -> dict[str, Any]:
        """RolloutConfig fields an evaluation call sets: greedy, or sampled at eval.temperature."""

    @abc.abstractmethod
    def engine(self) -> str | Callable[..., base_rollout.BaseRollout]:
        """ClusterConfig.rollout_engine: a name Tunix builds, or a BaseRollout factory."""


def rollout_backend(cfg: Config) -> RolloutBackend:
    """The engine half of cfg's rollout backend (rlexp.config.rollouts.rollout_spec)."""
    spec = rollout_spec(cfg)
    found = resolve(spec.engine, "rollout.name")
    if not (isinstance(found, type) and issubclass(found, RolloutBackend)):
        raise UserError(f"rollout.name={cfg.rollout.name!r}: its engine {spec.engine!r} is not "
                        "an rlexp.engine.rollout.RolloutBackend subclass")
    return found(cfg, spec)
