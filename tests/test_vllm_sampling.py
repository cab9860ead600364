"""rollout=vllm: the sampling settings rlexp hands Tunix's vLLM rollout, checked against vLLM's
own `SamplingParams` when vllm is importable, else against a stand-in that enforces the same
types and ranges (vllm/sampling_params.py: `SamplingParams._verify_args`, `sampling_type`).

What reaches vLLM is what Tunix 0.1.7 copies from rlexp's RolloutConfig: `VllmRollout.generate`
passes temperature, top_p, top_k, seed and max_tokens_to_generate to `VllmSampler.__call__`,
which sets `temperature` always and `top_p`/`top_k`/`seed` only when they are not None
(tunix/generate/vllm_sampler.py; test_the_mirror_matches_tunixs_sampler checks those lines).
"""

from __future__ import annotations

import dataclasses
import importlib.util
import math
from dataclasses import dataclass
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import numpy as np
import pytest

from rlexp.engine.rollout import rollout_backend
from rlexp.engine.rollout import vllm_parts

HAVE_VLLM = importlib.util.find_spec("vllm") is not None

_SAMPLING_EPS = 1e-5  # vllm/sampling_params.py: temperature below it is greedy


@dataclass
class StandInSamplingParams:
    """vLLM's SamplingParams fields that Tunix sets, with their declared types enforced (int
    seed, float temperature/top_p, int top_k/max_tokens/n) and `_verify_args`'s ranges."""

    n: int = 1
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    seed: Optional[int] = None
    max_tokens: Optional[int] = 16

    def __post_init__(self) -> None:
        def is_int(v: Any) -> bool:
            return isinstance(v, int) and not isinstance(v, bool)

        def is_float(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool)

        if not is_int(self.n) or self.n < 1:
            raise TypeError(f"n must be an int >= 1, got {self.n!r}")
        if not is_float(self.temperature) or not math.isfinite(self.temperature) \
                or not 0.0 <= self.temperature <= 2.0:
            raise TypeError(f"temperature must be a float in [0, 2], got {self.temperature!r}")
        if not is_float(self.top_p) or not 0.0 < self.top_p <= 1.0:
            raise TypeError(f"top_p must be a float in (0, 1], got {self.top_p!r}")
        if not is_int(self.top_k) or self.top_k < -1:
            raise TypeError(f"top_k must be an int, 0 (disable) or >= 1, got {self.top_k!r}")
        if self.seed is not None and not is_int(self.seed):
            raise TypeError(f"seed must be an int or None, got {type(self.seed).__name__}")
        if self.max_tokens is not None and (not is_int(self.max_tokens) or self.max_tokens < 1):
            raise TypeError(f"max_tokens must be an int >= 1, got {self.max_tokens!r}")

    @property
    def sampling_type(self) -> str:
        if self.temperature < _SAMPLING_EPS:
            return "GREEDY"
        return "RANDOM_SEED" if self.seed is not None else "RANDOM"


def sampling_params(**fields: Any) -> Any:
    """vLLM's SamplingParams when installed (its __post_init__ validates), else the stand-in."""
    if HAVE_VLLM:
        from vllm import SamplingParams

        return SamplingParams(**fields)
    return StandInSamplingParams(**fields)


def sampling_type(params: Any) -> str:
    kind = params.sampling_type
    return kind if isinstance(kind, str) else kind.name


def what_vllm_gets(rollout_config: Any) -> Any:
    """The SamplingParams Tunix 0.1.7's VllmRollout.generate -> VllmSampler.__call__ build
    from a RolloutConfig (return_logprobs, stop ids and detokenize aside)."""
    fields: dict[str, Any] = {"n": 1, "max_tokens": rollout_config.max_tokens_to_generate,
                              "temperature": rollout_config.temperature}
    for name in ("top_p", "top_k", "seed"):
        value = getattr(rollout_config, name)
        if value is not None:
            fields[name] = value
    return sampling_params(**fields)


class FakeVllmRollout:
    """Stands where Tunix's VllmRollout does: each generate call builds vLLM's sampling
    settings from the RolloutConfig it is given, as the real one does, and keeps them."""

    def __init__(self) -> None:
        self.params: list[Any] = []

    def generate(self, prompts: list[str], rollout_config: Any, **kw: Any) -> Any:
        self.params.append(what_vllm_gets(rollout_config))
        return SimpleNamespace(text=[f"out:{p}" for p in prompts], tokens=None, logprobs=None)


class FakeCluster:
    """RLCluster.generate's part that matters here (tunix/rl/rl_cluster.py 0.1.7): the
    rollout config of `mode`, one rollout.generate call per micro-batch of prompts."""

    def __init__(self, rollout: FakeVllmRollout, configs: dict[Any, Any]):
        self.rollout = rollout
        self.cluster_config = SimpleNamespace(rollout_config=configs)

    def generate(self, prompts: list[str], mode: Any, micro_batch_size: int) -> Any:
        rc = self.cluster_config.rollout_config[mode]
        outs = [self.rollout.generate(prompts[s:s + micro_batch_size], rc)
                for s in range(0, len(prompts), micro_batch_size)]
        return SimpleNamespace(text=[t for o in outs for t in o.text])


@pytest.fixture()
def vllm_cfg(compose_config):
    def make(*overrides: str):
        return compose_config("rollout=vllm", "model=qwen3-0.6b", "model.path=/ckpt",
                              "hardware=gpu", "rollout.top_k=50", "rollout.temperature=0.9",
                              "eval.temperature=0.7", *overrides)
    return make


def _rollout_config(cfg: Any, temperature: Optional[float] = None) -> Any:
    from tunix.rl.rollout import base_rollout

    fields = rollout_backend(cfg).rollout_fields(temperature)
    return base_rollout.RolloutConfig(**fields)


def test_the_training_settings_are_valid_vllm_sampling_params(vllm_cfg):
    params = what_vllm_gets(_rollout_config(vllm_cfg()))
    assert (params.temperature, params.top_p, params.top_k) == (0.9, 1.0, 50)
    assert params.max_tokens == 512 and params.seed is None


def test_every_sampler_call_gets_an_int_seed_from_the_key_stream(vllm_cfg):
    """Failed before the fix: SamplingKeys put a JAX PRNG key (uint32[2]) in the seed. Each
    TorchVllmRollout.generate call passes request_seed of the backend's next key."""
    from rlexp.engine import rollout_key

    rc = _rollout_config(vllm_cfg())
    rollout = FakeVllmRollout()
    keys = rollout_backend(vllm_cfg()).keys

    def seeds_of_step(step: int, calls: int = 2) -> list[int]:
        keys.reset(rollout_key(0, step))
        for i in range(calls):
            seed = vllm_parts.request_seed(keys.next())
            rollout.generate([f"p{i}"], dataclasses.replace(rc, seed=seed))
        return [p.seed for p in rollout.params[-calls:]]

    first = seeds_of_step(5)
    assert all(type(s) is int and 0 <= s < 2**31 for s in first), first
    assert first[0] != first[1]  # a fresh seed per sampler call
    assert seeds_of_step(5) == first  # a pure function of (train.seed, step, call)
    assert not set(seeds_of_step(6)) & set(first)
    assert {sampling_type(p) for p in rollout.params} == {"RANDOM_SEED"}


def test_on_tpu_no_per_request_seed_reaches_vllm(compose_config):
    """tpu-inference refuses a per-request seed (tpu_inference/platforms/tpu_platform.py
    validate_request: "JAX does not support per-request seed."): the engine's seed instead.
    The vllm_tpu backend hands Tunix its own VllmRollout, by name: no rlexp key reaches it."""
    cfg = compose_config("rollout=vllm", "model=qwen3-0.6b", "model.path=/ckpt",
                         "hardware=v6e-8", "rollout.tensor_parallel_size=8", "train.seed=7")
    rc = _rollout_config(cfg)
    assert rc.rollout_vllm_kwargs == {"seed": 7}  # vLLM's engine-wide seed (EngineArgs.seed)
    assert rollout_backend(cfg).engine() == "vllm"
    rollout = FakeVllmRollout()
    rollout.generate(["p"], rc)
    assert rollout.params[0].seed is None and sampling_type(rollout.params[0]) == "RANDOM"


def test_greedy_evaluation_is_temperature_zero_under_vllm(vllm_cfg):
    """Failed before the fix: greedy set top_p=None, which VllmSampler skips, so vLLM sampled
    at eval.temperature (0.7)."""
    from rlexp.engine import TunixEngine, eval_key
    from rlexp.engine.tunix_adapter import Mode

    cfg = vllm_cfg()
    rollout = FakeVllmRollout()
    cluster = FakeCluster(rollout, {Mode.EVAL: _rollout_config(cfg, cfg.eval.temperature)})
    engine = TunixEngine(cfg=cfg, tokenizer=None, splits=None, terms=[], cluster=cluster,
                         learner=None, probe=None,
                         step_runner=SimpleNamespace(rollout_rows=2, sync_for_eval=lambda: None),
                         rollout=rollout_backend(cfg), schedule=None, updates_per_step=1)
    prompts = ["a", "b", "c"]
    assert engine.generate(prompts, eval_key(0), greedy=True) == ["out:a", "out:b", "out:c"]
    assert [sampling_type(p) for p in rollout.params] == ["GREEDY", "GREEDY"]
    rollout.params.clear()
    engine.generate(prompts, eval_key(0), greedy=False)  # the sampled pass after a greedy one
    assert {(p.temperature, p.top_p, p.top_k) for p in rollout.params} == {(0.7, 1.0, 50)}
    assert {sampling_type(p) for p in rollout.params} == {"RANDOM"}


def test_vanilla_greedy_keeps_tunixs_top_p_none_convention(compose_config):
    """The vanilla sampler decodes greedily when top_p is None (tunix/generate/sampler.py)."""
    backend = rollout_backend(compose_config("rollout.top_p=0.95", "eval.temperature=0.7"))
    assert backend.eval_sampling(greedy=True) == {"top_p": None}
    assert backend.eval_sampling(greedy=False) == {"top_p": 0.95, "temperature": 0.7}


def test_row_seeds_differ_within_a_call_and_repeat_across_runs():
    seeds = vllm_parts.row_seeds(12345, 64)
    assert len(set(seeds)) == 64 and all(type(s) is int and 0 <= s < 2**31 for s in seeds)
    assert vllm_parts.row_seeds(12345, 64) == seeds
    assert vllm_parts.row_seeds(12345, 4) == seeds[:4]  # a row's seed ignores the call size
    assert vllm_parts.row_seeds(12346, 4) != seeds[:4]


def test_one_seed_per_row_reaches_llm_generate():
    """GRPO repeats each prompt G times in one sampler call; vLLM seeds a request's generator
    from SamplingParams.seed, so one shared seed would give the G copies the same noise (and
    the same completion): every row gets its own seed, derived from the call's."""

    class Llm:
        def __init__(self) -> None:
            self.got: Any = None

        def generate(self, prompts: Any, sampling_params: Any = None, **kw: Any) -> list[str]:
            self.got = sampling_params
            return ["x"] * len(prompts)

    class Params(StandInSamplingParams):
        def clone(self) -> "Params":
            return Params(**vars(self))

    llm = vllm_parts.RowSeeds(Llm())
    shared = Params(seed=99, temperature=0.9)
    assert llm.generate(prompts=["q"] * 4, sampling_params=shared, use_tqdm=False) == ["x"] * 4
    assert [p.seed for p in llm.got] == vllm_parts.row_seeds(99, 4)
    assert {p.temperature for p in llm.got} == {0.9} and shared.seed == 99
    unseeded = Params(seed=None)
    llm.generate(prompts=["q"] * 4, sampling_params=unseeded)
    assert llm.got is unseeded  # nothing to spread: vLLM's own RNG (`got`: the LLM's own)


def test_the_mirror_matches_tunixs_sampler():
    """what_vllm_gets above copies Tunix 0.1.7's VllmSampler.__call__: check its lines."""
    spec = importlib.util.find_spec("tunix")
    assert spec is not None and spec.origin is not None
    source = (Path(spec.origin).parent / "generate" / "vllm_sampler.py").read_text()
    for line in ("sampling_params.temperature = temperature", "if top_p is not None:",
                 "sampling_params.top_p = top_p", "if top_k is not None:",
                 "sampling_params.top_k = top_k", "if seed is not None:",
                 "sampling_params.seed = seed", "sampling_params.max_tokens = max_generation_steps",
                 "prompts=prompt_objects", "sampling_params=self.sampling_params"):
        assert line in source, line
    rollout = (Path(spec.origin).parent / "rl" / "rollout" / "vllm_rollout.py").read_text()
    for line in ("temperature=rollout_config.temperature", "top_p=rollout_config.top_p",
                 "top_k=rollout_config.top_k", "seed=rollout_config.seed",
                 "**rollout_config.rollout_vllm_kwargs"):
        assert line in rollout, line


def test_stand_in_refuses_what_vllm_refuses():
    import jax

    with pytest.raises(TypeError, match="seed must be an int"):
        StandInSamplingParams(seed=jax.random.PRNGKey(0))  # what SamplingKeys used to send
    with pytest.raises(TypeError, match="seed must be an int"):
        StandInSamplingParams(seed=np.uint32(3))
    with pytest.raises(TypeError, match="top_p"):
        StandInSamplingParams(top_p=0.0)
    with pytest.raises(TypeError, match="top_k"):
        StandInSamplingParams(top_k=None)  # type: ignore[arg-type]
    assert StandInSamplingParams(temperature=0.0).sampling_type == "GREEDY"
