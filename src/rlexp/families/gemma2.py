"""Gemma 2 (tunix/models/gemma and its params_safetensors.py loader). Not Gemma 1 (`gemma`): its
`post_attention_layernorm` is the pre-MLP norm, which that loader puts in Gemma 2's
post-attention slot. config.json must agree with what Tunix's Gemma fixes (unsupported()): e.g.
query_pre_attn_scalar = head_dim (2B, 9B; not 27B). Computes in its weights' dtype."""

from __future__ import annotations

from typing import Any

from rlexp.families.family import GEMMA_PROJECTIONS, ModelFamily, common_fields, rope, text_config
from rlexp.families.gemma3 import gemma_weights, tp_dims

ROPE_THETA = 10_000.0
NORM_EPS = 1e-6
ATTN_SOFTCAP = 50.0
FINAL_SOFTCAP = 30.0


def layer_types(num_layers: int) -> list[str]:
    return ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(num_layers)]


def tunix_config(module: Any, m: Any, remat: str, dtype: Any, param_dtype: Any) -> Any:
    kinds = {"sliding_attention": module.AttentionType.LOCAL_SLIDING,
             "full_attention": module.AttentionType.GLOBAL}
    return module.ModelConfig(
        num_layers=m.num_layers, num_embed=m.vocab_size, embed_dim=m.embed_dim,
        hidden_dim=m.hidden_dim, num_heads=m.num_heads, head_dim=m.head_dim,
        num_kv_heads=m.num_kv_heads, final_logit_softcap=FINAL_SOFTCAP, use_post_attn_norm=True,
        use_post_ffw_norm=True, attention_types=tuple(kinds[t] for t in layer_types(m.num_layers)),
        attn_logits_soft_cap=ATTN_SOFTCAP, sliding_window_size=m.sliding_window,
        remat_config=getattr(module.RematConfig, remat))


def read_hf(hf: dict) -> dict:
    out = common_fields(hf)
    out["rope_theta"] = ("rope_theta", float(rope(hf)["rope_theta"]))
    if "sliding_window" in hf:
        out["sliding_window"] = ("sliding_window", hf["sliding_window"])
    return out


def unsupported(hf: dict) -> str | None:
    t = text_config(hf)
    n = int(t.get("num_hidden_layers", 0))
    why = []
    if t.get("layer_types") and list(t["layer_types"]) != layer_types(n):
        why.append("layer_types are not local and global alternating")
    if float(rope(t)["rope_theta"]) != ROPE_THETA:
        why.append(f"RoPE base is not {ROPE_THETA:g}")
    if rope(t).get("rope_type", "default") not in ("default", None):
        why.append(f"RoPE type {rope(t)['rope_type']}")
    scalar = t.get("query_pre_attn_scalar")
    if scalar is not None and int(scalar) != int(t.get("head_dim") or 256):
        why.append(f"query_pre_attn_scalar={scalar} is not head_dim")
    if (t.get("attn_logit_softcapping"), t.get("final_logit_softcapping")) != (ATTN_SOFTCAP,
                                                                              FINAL_SOFTCAP):
        why.append(f"logit soft-capping is not {ATTN_SOFTCAP:g} / {FINAL_SOFTCAP:g}")
    if abs(float(t.get("rms_norm_eps", NORM_EPS)) - NORM_EPS) > 1e-12:
        why.append(f"rms_norm_eps is not {NORM_EPS:g}")
    if t.get("tie_word_embeddings", True) is False:
        why.append("untied embeddings")
    if not why:
        return None
    return "config.json is not what Tunix 0.1.7's gemma model runs: " + "; ".join(why)


def write_hf(m: Any, dtype: str) -> dict:
    return {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2",
            "hidden_activation": "gelu_pytorch_tanh", "num_hidden_layers": m.num_layers,
            "hidden_size": m.embed_dim, "num_attention_heads": m.num_heads,
            "num_key_value_heads": m.num_kv_heads, "head_dim": m.head_dim,
            "intermediate_size": m.hidden_dim, "vocab_size": m.vocab_size,
            "rope_theta": ROPE_THETA, "sliding_window": m.sliding_window,
            "layer_types": layer_types(m.num_layers), "query_pre_attn_scalar": m.head_dim,
            "attn_logit_softcapping": ATTN_SOFTCAP, "final_logit_softcapping": FINAL_SOFTCAP,
            "rms_norm_eps": NORM_EPS, "max_position_embeddings": m.max_position,
            "tie_word_embeddings": True, "torch_dtype": dtype}


FAMILY = ModelFamily(
    name="gemma2", model_types=("gemma2",), tunix_package="tunix.models.gemma", model_class="Gemma",
    loader_module="params_safetensors", tunix_config=tunix_config, read_hf=read_hf,
    write_hf=write_hf, to_hf_weights=gemma_weights, unsupported=unsupported, norms_per_layer=4,
    tp_dims=tp_dims, lora_projections=GEMMA_PROJECTIONS, patches=("compute_dtype",))
