"""Qwen2 / Qwen2.5 (tunix/models/qwen2): Llama-style decoder with biases on q, k and v; RoPE theta
and dtype from its config (no patch). Tunix lacks `use_sliding_window` (off in every Qwen2.5
checkpoint): a checkpoint that turns it on is refused."""

from __future__ import annotations

from typing import Any

from rlexp.families.family import (ModelFamily, base_hf_config, common_fields, decoder_weights,
                                   rope)
from rlexp.families.qwen3 import tunix_config  # Tunix's qwen2 ModelConfig has qwen3's fields


def read_hf(hf: dict) -> dict:
    out = common_fields(hf)
    out["rope_theta"] = ("rope_theta", float(rope(hf)["rope_theta"]))
    if "tie_word_embeddings" in hf:
        out["tie_word_embeddings"] = ("tie_embeddings", bool(hf["tie_word_embeddings"]))
    return out


def unsupported(hf: dict) -> str | None:
    if hf.get("use_sliding_window"):
        return "config.json has use_sliding_window=true, which Tunix's qwen2 model lacks"
    if rope(hf).get("rope_type", "default") not in ("default", None):
        return f"config.json has rope type {rope(hf)['rope_type']}, Tunix's qwen2 only the default"
    return None


def write_hf(m: Any, dtype: str) -> dict:
    return {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_act": "silu",
            "use_sliding_window": False, **base_hf_config(m, dtype)}


FAMILY = ModelFamily(
    name="qwen2", model_types=("qwen2",), tunix_package="tunix.models.qwen2", model_class="Qwen2",
    tunix_config=tunix_config, read_hf=read_hf, write_hf=write_hf, to_hf_weights=decoder_weights,
    unsupported=unsupported, vllm_untied_head=True, qkv_bias=True)
