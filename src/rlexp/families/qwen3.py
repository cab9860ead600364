"""Qwen3 (tunix/models/qwen3): Llama-style decoder with q/k RMSNorms, no biases. Also the tiny
random-init model."""

from __future__ import annotations

from typing import Any

from rlexp.families.family import (ModelFamily, base_hf_config, common_fields, decoder_weights,
                                   standard_tp_dims)


def tunix_config(module: Any, m: Any, remat: str, dtype: Any, param_dtype: Any) -> Any:
    # Tunix's qwen3 casts its weights to ModelConfig.dtype itself.
    return module.ModelConfig(
        num_layers=m.num_layers, vocab_size=m.vocab_size, embed_dim=m.embed_dim,
        hidden_dim=m.hidden_dim, num_heads=m.num_heads, head_dim=m.head_dim,
        num_kv_heads=m.num_kv_heads, rope_theta=int(m.rope_theta), norm_eps=m.norm_eps,
        use_tied_embedding=m.tie_embeddings, remat_config=getattr(module.RematConfig, remat),
        dtype=dtype, param_dtype=param_dtype)


def write_hf(m: Any, dtype: str) -> dict:
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_act": "silu",
            "attention_bias": False, **base_hf_config(m, dtype)}


def tp_dims(m: Any) -> dict[str, int]:
    return {**standard_tp_dims(m), "head_dim": m.head_dim}  # q/k norm weights over tp


FAMILY = ModelFamily(
    name="qwen3", model_types=("qwen3",), tunix_package="tunix.models.qwen3", model_class="Qwen3",
    tunix_config=tunix_config, read_hf=common_fields, write_hf=write_hf,
    to_hf_weights=decoder_weights, vllm_untied_head=True, qk_norm=True, tp_dims=tp_dims,
    patches=("rope_theta",), random_init=True)
