"""Llama 3 (tunix/models/llama3): Llama 3.x and Llama-architecture models such as SmolLM2."""

from __future__ import annotations

from typing import Any

from rlexp.families.family import ModelFamily, base_hf_config, common_fields, decoder_weights


def tunix_config(module: Any, m: Any, remat: str, dtype: Any, param_dtype: Any) -> Any:
    # No dtype in Tunix's llama3 config: it computes in its weights' dtype (patch compute_dtype).
    return module.ModelConfig(
        num_layers=m.num_layers, vocab_size=m.vocab_size, embed_dim=m.embed_dim,
        hidden_dim=m.hidden_dim, num_heads=m.num_heads, head_dim=m.head_dim,
        num_kv_heads=m.num_kv_heads, rope_theta=int(m.rope_theta), norm_eps=m.norm_eps,
        weight_tying=m.tie_embeddings, remat_config=getattr(module.RematConfig, remat))


def write_hf(m: Any, dtype: str) -> dict:
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_act": "silu",
            "attention_bias": False, **base_hf_config(m, dtype)}


FAMILY = ModelFamily(
    name="llama3", model_types=("llama",), tunix_package="tunix.models.llama3",
    model_class="Llama3", tunix_config=tunix_config, read_hf=common_fields, write_hf=write_hf,
    to_hf_weights=decoder_weights, vllm_untied_head=True, patches=("rope_theta", "compute_dtype"))
