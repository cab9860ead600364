"""Cohere (Aya Expanse, Command R): rlexp's own model (rlexp.engine.cohere; Tunix has none).
config.json must have no attention biases, default RoPE and a SiLU MLP; `use_qk_norm` is Command
R+'s per-head q/k LayerNorms. Export uses the Llama-layout mapping."""

from __future__ import annotations

from typing import Any

from rlexp.families.family import ModelFamily, common_fields, decoder_weights, rope


def tunix_config(module: Any, m: Any, remat: str, dtype: Any, param_dtype: Any) -> Any:
    return module.ModelConfig(
        num_layers=m.num_layers, vocab_size=m.vocab_size, embed_dim=m.embed_dim,
        hidden_dim=m.hidden_dim, num_heads=m.num_heads, head_dim=m.head_dim,
        num_kv_heads=m.num_kv_heads, rope_theta=float(m.rope_theta), norm_eps=m.norm_eps,
        logit_scale=float(m.logit_scale), use_qk_norm=m.qk_norm, weight_tying=m.tie_embeddings,
        remat_config=getattr(module.RematConfig, remat), dtype=dtype, param_dtype=param_dtype)


def read_hf(hf: dict) -> dict:
    out = common_fields(hf)
    out["rope_theta"] = ("rope_theta", float(rope(hf)["rope_theta"]))
    # transformers' CohereConfig defaults (configuration_cohere.py) where config.json is silent
    out["layer_norm_eps"] = ("norm_eps", float(hf.get("layer_norm_eps", 1e-5)))
    out["logit_scale"] = ("logit_scale", float(hf.get("logit_scale", 0.0625)))
    out["use_qk_norm"] = ("qk_norm", bool(hf.get("use_qk_norm", False)))
    out["tie_word_embeddings"] = ("tie_embeddings", bool(hf.get("tie_word_embeddings", True)))
    return out


def unsupported(hf: dict) -> str | None:
    why = []
    if hf.get("attention_bias"):
        why.append("attention_bias=true")
    kind = rope(hf).get("rope_type") or rope(hf).get("type") or "default"
    if kind != "default":
        why.append(f"RoPE type {kind} (rlexp's Cohere model rotates unscaled)")
    if hf.get("hidden_act", "silu") != "silu":
        why.append(f"hidden_act={hf['hidden_act']}")
    return "config.json is not what rlexp's cohere model runs: " + "; ".join(why) if why else None


def write_hf(m: Any, dtype: str) -> dict:
    return {"architectures": ["CohereForCausalLM"], "model_type": "cohere", "hidden_act": "silu",
            "attention_bias": False, "num_hidden_layers": m.num_layers, "hidden_size": m.embed_dim,
            "num_attention_heads": m.num_heads, "num_key_value_heads": m.num_kv_heads,
            "head_dim": m.head_dim, "intermediate_size": m.hidden_dim, "vocab_size": m.vocab_size,
            "rope_theta": m.rope_theta, "layer_norm_eps": m.norm_eps, "logit_scale": m.logit_scale,
            "use_qk_norm": m.qk_norm, "max_position_embeddings": m.max_position,
            "tie_word_embeddings": m.tie_embeddings, "torch_dtype": dtype}


def norm_params(m: Any) -> int:
    """Norm weights per layer: the input LayerNorm and, with model.qk_norm, per-head q/k ones."""
    return m.embed_dim + ((m.num_heads + m.num_kv_heads) * m.head_dim if m.qk_norm else 0)


FAMILY = ModelFamily(
    name="cohere", model_types=("cohere",),
    tunix_package="rlexp.engine.cohere", model_class="Cohere", tunix_config=tunix_config,
    read_hf=read_hf, write_hf=write_hf, to_hf_weights=decoder_weights, unsupported=unsupported,
    norms_per_layer=1, layer_norm_params=norm_params)
