"""rollout=vllm: cfg.rollout mapped onto Tunix's vLLM rollout (tunix.rl.rollout.vllm_rollout).

Tunix drives vLLM through `ClusterConfig(rollout_engine="vllm")` and the `rollout_vllm_*`
fields of `tunix.rl.rollout.base_rollout.RolloutConfig`; `VllmRollout` passes them on to
`VllmSampler`/`VllmConfig` (tensor_parallel_size, data_parallel_size, hbm_utilization, the
engine's `model`, `max_model_len` = kv_cache_size, ...). vLLM runs on GPUs, and on TPUs
through the `tpu-inference` backend (TPU JAX backend type "jax").

Seeds. vLLM takes `SamplingParams.seed` as an int (vllm/sampling_params.py), which Tunix's
`VllmSampler` copies from `RolloutConfig.seed` into the one SamplingParams it gives every prompt
of a call. So (1) each sampler call gets an int derived from the run's key stream
(`request_seed`: the same (train.seed, step, call) gives the same int); (2) on GPU `seed_rows`
spreads it into one seed per prompt, because vLLM seeds each request's generator from it and
GRPO's G copies of a prompt would otherwise draw the same noise and the same completion;
(3) on TPU no per-request seed is sent: tpu-inference refuses one ("JAX does not support
per-request seed.", tpu_inference/platforms/tpu_platform.py validate_request), so vLLM's
engine-wide seed (EngineArgs.seed) is train.seed instead.

Greedy evaluation is temperature 0 under vLLM (SamplingParams: "Zero means greedy sampling");
Tunix's vanilla convention, top_p=None, is skipped by VllmSampler (engine.tunix_adapter
eval_sampling).

Nothing here imports vllm or tpu_inference: `check_vllm_available` only looks for them, and
the mapping is a plain dict of RolloutConfig keyword arguments (tested without vLLM).
"""

from __future__ import annotations

import importlib.util
from typing import Any, Callable, Sequence

import numpy as np

from rlexp.base.errors import UserError
from rlexp.config.schema import Config

# Imported inside functions, on purpose: vLLM is optional (rlexp[vllm]) and Tunix's vLLM sampler
# imports it: both only when rollout=vllm builds.

INSTALL = "pip install 'rlexp[vllm]'"
# What a user without vLLM runs instead (the same recipe on Tunix's own sampler).
VANILLA = "rollout=vanilla runs the same recipe with Tunix's sampler"
# Seeds are drawn below 2**31: every vLLM backend takes them (torch.Generator.manual_seed too).
SEED_BOUND = 2**31 - 1


def check_vllm_available(cfg: Config) -> None:
    """Raise UserError (one line) when the packages rollout=vllm needs are not installed."""
    if importlib.util.find_spec("vllm") is None:
        raise UserError(f"rollout=vllm needs vllm, which is not installed ({INSTALL} on a "
                        f"GPU/TPU host); {VANILLA}")
    if cfg.hardware.platform == "tpu" and not cfg.hardware.emulate \
            and importlib.util.find_spec("tpu_inference") is None:
        raise UserError(f"rollout=vllm on TPU needs tpu-inference, which is not installed "
                        f"(pip install 'rlexp[vllm-tpu]' on the TPU host); {VANILLA}")


def request_seed(rollout_config: Any, key: Any) -> int | None:
    """RolloutConfig.seed of one vLLM sampler call, from its JAX key: an int below 2**31 (a
    pure function of the key), or None on TPU, where tpu-inference refuses per-request seeds."""
    if rollout_config.rollout_vllm_tpu_backend_type is not None:
        return None
    import jax

    return int(jax.random.randint(key, (), 0, SEED_BOUND))


def row_seeds(seed: int, rows: int) -> list[int]:
    """One seed per prompt of a call seeded `seed`: distinct words of NumPy's SeedSequence
    (row i's seed depends only on (seed, i)), below 2**31."""
    words = np.random.SeedSequence(seed).generate_state(rows, np.uint64)
    return [int(w % SEED_BOUND) for w in words]


def seed_rows(llm: Any) -> None:
    """Make `llm.generate` (vLLM's LLM, which Tunix's VllmSampler calls with one
    SamplingParams for every prompt) give each prompt its own seed, from row_seeds of the
    call's seed. A call without a seed (TPU) keeps vLLM's own random stream."""
    generate: Callable[..., Any] = llm.generate

    def generate_seeded_rows(prompts: Sequence[Any], sampling_params: Any = None,
                             **kw: Any) -> Any:
        seed = getattr(sampling_params, "seed", None)
        if seed is not None:
            rows = []
            for row_seed in row_seeds(seed, len(prompts)):
                params = sampling_params.clone()
                params.seed = row_seed
                rows.append(params)
            sampling_params = rows
        return generate(prompts=prompts, sampling_params=sampling_params, **kw)

    llm.generate = generate_seeded_rows


def check_parallelism(cfg: Config) -> None:
    """vLLM's tensor x data parallel replicas must tile the rollout mesh, and tensor
    parallelism must split the attention heads evenly."""
    r, m = cfg.rollout, cfg.model
    mesh = cfg.hardware.rollout_mesh
    devices = mesh.fsdp * mesh.tp
    if r.tensor_parallel_size * r.data_parallel_size != devices:
        raise UserError(
            f"rollout.tensor_parallel_size={r.tensor_parallel_size} x rollout.data_parallel_size="
            f"{r.data_parallel_size} must equal the {devices} devices of hardware.rollout_mesh "
            f"(hardware={cfg.hardware.name})")
    if m.num_heads % r.tensor_parallel_size:
        raise UserError(f"rollout.tensor_parallel_size={r.tensor_parallel_size} does not divide "
                        f"model.num_heads={m.num_heads} (model={m.name})")


def vllm_rollout_config(cfg: Config, model_path: str | None = None,
                        temperature: float | None = None) -> dict[str, Any]:
    """Keyword arguments of Tunix's RolloutConfig for rollout=vllm.

    model_path: the HF checkpoint dir vLLM loads its config and tokenizer from (default
    model.path); Tunix then syncs the trainer's weights into it every step, so vLLM starts
    from random weights instead of reading them twice. temperature: override for evaluation.
    """
    r = cfg.rollout
    path = model_path or cfg.model.path
    if not path:
        raise UserError(f"rollout=vllm needs model.path (vLLM reads the HF config and tokenizer "
                        f"from it); model={cfg.model.name} has none")
    if not 0 < r.hbm_utilization <= 1:
        raise UserError(f"rollout.hbm_utilization={r.hbm_utilization} is invalid: must be in (0, 1]")
    check_parallelism(cfg)
    return {
        # Sampling (the same knobs as the vanilla rollout).
        "max_tokens_to_generate": r.max_completion_length,
        "temperature": r.temperature if temperature is None else temperature,
        "top_p": 1.0 if r.top_p is None else r.top_p,
        "top_k": r.top_k,
        "max_prompt_length": r.max_prompt_length,
        # VllmRollout passes it as vLLM's max_model_len.
        "kv_cache_size": r.kv_cache_size,
        # Parallelism of the vLLM engine over the rollout mesh.
        "tensor_parallel_size": r.tensor_parallel_size,
        "data_parallel_size": r.data_parallel_size,
        # vLLM specifics.
        "rollout_vllm_model_version": str(path),
        "rollout_vllm_hbm_utilization": r.hbm_utilization,
        "rollout_vllm_init_with_random_weights": True,
        "rollout_vllm_tpu_backend_type": "jax" if cfg.hardware.platform == "tpu" else None,
        # vLLM's engine-wide seed (EngineArgs.seed): the only seed tpu-inference takes.
        "rollout_vllm_kwargs": {"seed": cfg.train.seed},
        # The policy loss needs the sampler's log-probs only off-policy; Tunix recomputes them.
        "return_logprobs": False,
    }


def make_rollout_config(cfg: Config, model_path: str | None = None,
                        temperature: float | None = None) -> Any:
    """Tunix's RolloutConfig for rollout=vllm (checks that vLLM is installed first)."""
    check_vllm_available(cfg)
    from tunix.rl.rollout import base_rollout

    return base_rollout.RolloutConfig(**vllm_rollout_config(cfg, model_path, temperature))
