"""Gemma 3 text models (tunix/models/gemma3): 1B (`gemma3_text`) and the language model of the
multimodal 4B/12B/27B checkpoints (`gemma3`: `text_config`, no vision tower). config.json must
agree with what Tunix 0.1.7's Gemma3 fixes (unsupported()): e.g. query_pre_attn_scalar =
head_dim (1B/4B/12B; 27B's is not and is refused). RMSNorm weights are offsets from 1 in both
layouts. The model computes in its weights' dtype (compute_dtype)."""

from __future__ import annotations

import re
from functools import partial
from typing import Any

import numpy as np

from rlexp.families.family import (GEMMA_PROJECTIONS, ModelFamily, common_fields, map_weights,
                                   rope, text_config, unknown)

# Tunix 0.1.7's fixed Gemma 3 numbers (tunix/models/gemma3/model.py).
LOCAL_ROPE_THETA = 10_000.0
NORM_EPS = 1e-6
SLIDING_PATTERN = 6  # layers 0-4 of every 6 slide, layer 5 is global


def layer_types(num_layers: int) -> list[str]:
    return ["full_attention" if (i + 1) % SLIDING_PATTERN == 0 else "sliding_attention"
            for i in range(num_layers)]


def tunix_config(module: Any, m: Any, remat: str, dtype: Any, param_dtype: Any) -> Any:
    return module.ModelConfig(
        num_layers=m.num_layers, num_embed=m.vocab_size, embed_dim=m.embed_dim,
        hidden_dim=m.hidden_dim, num_heads=m.num_heads, head_dim=m.head_dim,
        num_kv_heads=m.num_kv_heads, sliding_window_size=m.sliding_window,
        local_base_frequency=int(LOCAL_ROPE_THETA), global_base_frequency=int(m.rope_theta),
        global_scale_factor=m.rope_scale,
        query_pre_attn_norm=module.QueryPreAttentionNormalisation.BY_ONE_OVER_SQRT_HEAD_DIM,
        remat_config=getattr(module.RematConfig, remat), param_dtype=param_dtype)


def read_hf(hf: dict) -> dict:
    t = text_config(hf)
    out = common_fields(t)
    glob = rope(t, "full_attention")
    out["rope_theta"] = ("rope_theta", float(glob["rope_theta"]))
    out["rope_scaling.factor"] = ("rope_scale", float(glob.get("factor") or 1.0))
    if "sliding_window" in t:
        out["sliding_window"] = ("sliding_window", t["sliding_window"])
    return out


def unsupported(hf: dict) -> str | None:
    t = text_config(hf)
    n = int(t.get("num_hidden_layers", 0))
    local = rope(t, "sliding_attention")
    scalar = t.get("query_pre_attn_scalar")
    kind = rope(t, "full_attention").get("rope_type", "default")
    why = []
    if t.get("layer_types") and list(t["layer_types"]) != layer_types(n):
        why.append("layer_types differ from Tunix's 5 local : 1 global pattern")
    if "rope_local_base_freq" in t or "rope_parameters" in t:
        if float(t.get("rope_local_base_freq", local["rope_theta"])) != LOCAL_ROPE_THETA:
            why.append(f"local RoPE base is not {LOCAL_ROPE_THETA:g}")
    if kind not in ("default", "linear", None):
        why.append(f"RoPE type {kind} (Tunix scales linearly)")
    if scalar is not None and int(scalar) != int(t.get("head_dim") or 256):  # HF's defaults
        why.append(f"query_pre_attn_scalar={scalar} is not head_dim")
    if t.get("attn_logit_softcapping") or t.get("final_logit_softcapping"):
        why.append("logit soft-capping is set")
    if abs(float(t.get("rms_norm_eps", NORM_EPS)) - NORM_EPS) > 1e-12:
        why.append(f"rms_norm_eps is not {NORM_EPS:g}")
    if t.get("tie_word_embeddings", hf.get("tie_word_embeddings", True)) is False:
        why.append("untied embeddings")
    if not why:
        return None
    return "config.json is not what Tunix 0.1.7's gemma3 model runs: " + "; ".join(why)


def write_hf(m: Any, dtype: str) -> dict:
    return {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "hidden_activation": "gelu_pytorch_tanh", "num_hidden_layers": m.num_layers,
            "hidden_size": m.embed_dim, "num_attention_heads": m.num_heads,
            "num_key_value_heads": m.num_kv_heads, "head_dim": m.head_dim,
            "intermediate_size": m.hidden_dim, "vocab_size": m.vocab_size,
            "rope_theta": m.rope_theta, "rope_local_base_freq": LOCAL_ROPE_THETA,
            "rope_scaling": ({"rope_type": "linear", "factor": m.rope_scale}
                             if m.rope_scale != 1.0 else None),
            "sliding_window": m.sliding_window, "layer_types": layer_types(m.num_layers),
            "query_pre_attn_scalar": m.head_dim, "rms_norm_eps": NORM_EPS,
            "max_position_embeddings": m.max_position, "tie_word_embeddings": True,
            "attn_logit_softcapping": None, "final_logit_softcapping": None,
            "torch_dtype": dtype}


def export_config(base: dict, m: Any, dtype: str) -> dict:
    """Language model only: a multimodal text_config becomes a Gemma3ForCausalLM config.json."""
    if "text_config" not in base:
        return {**base, "torch_dtype": dtype}
    keep = {k: base[k] for k in ("bos_token_id", "eos_token_id", "pad_token_id") if k in base}
    return {**write_hf(m, dtype), **keep, **base["text_config"],
            "architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
            "torch_dtype": dtype}


GEMMA_TOP = {"embedder.input_embedding": ("model.embed_tokens.weight", False),
             "final_norm.scale": ("model.norm.weight", False)}
# Tunix Gemma layer norm -> HF name (tunix/models/gemma3/params_safetensors.py).
NORMS = {"pre_attention_norm": "input_layernorm", "post_attention_norm": "post_attention_layernorm",
         "post_attn_norm": "post_attention_layernorm",  # Tunix's gemma (2) spells it so
         "pre_ffw_norm": "pre_feedforward_layernorm", "post_ffw_norm": "post_feedforward_layernorm"}


def gemma_layer(i: int, name: str, w: np.ndarray, m: Any) -> dict[str, np.ndarray]:
    """Tunix's Gemma layout: q as [heads, embed, hd] (q_einsum), k and v stacked as
    [2, kv heads, embed, hd] (kv_einsum), or all three as [3, heads, embed, hd] when heads =
    kv heads (qkv_einsum); o as [heads, hd, embed] (attn_vec_einsum)."""
    p = f"model.layers.{i}."

    def proj(x: np.ndarray) -> np.ndarray:  # [heads, embed, hd] -> [heads * hd, embed]
        return x.transpose(0, 2, 1).reshape(-1, x.shape[1])
    if name == "attn.q_einsum.w":
        return {p + "self_attn.q_proj.weight": proj(w)}
    if name in ("attn.kv_einsum.w", "attn.qkv_einsum.w"):  # "kv" or "qkv", stacked on axis 0
        kinds = name.split(".")[1].split("_")[0]
        return {p + f"self_attn.{n}_proj.weight": proj(w[j]) for j, n in enumerate(kinds)}
    if name == "attn.attn_vec_einsum.w":  # [heads, hd, embed]
        return {p + "self_attn.o_proj.weight": w.reshape(-1, w.shape[-1]).T}
    if name in ("attn._query_norm.scale", "attn._key_norm.scale"):
        return {p + f"self_attn.{name[6]}_norm.weight": w}
    if (hit := re.fullmatch(r"(\w+)\.scale", name)) is not None and hit.group(1) in NORMS:
        return {p + NORMS[hit.group(1)] + ".weight": w}
    if (hit := re.fullmatch(r"mlp\.(gate|up|down)_proj\.kernel", name)) is not None:
        return {p + f"mlp.{hit.group(1)}_proj.weight": w.T}
    raise unknown(i, name)


gemma_weights = partial(map_weights, layer=gemma_layer, top=GEMMA_TOP)


def tp_dims(m: Any) -> dict[str, int]:
    # A single kv head is replicated over tp (Tunix shards kv_einsum over fsdp only then).
    dims = {"embed_dim": m.embed_dim, "num_heads": m.num_heads, "hidden_dim": m.hidden_dim,
            "vocab_size": m.vocab_size}
    return {**dims, "num_kv_heads": m.num_kv_heads} if m.num_kv_heads > 1 else dims


FAMILY = ModelFamily(
    name="gemma3", model_types=("gemma3_text", "gemma3"), tunix_package="tunix.models.gemma3",
    model_class="Gemma3", loader_module="params_safetensors", tunix_config=tunix_config,
    read_hf=read_hf, write_hf=write_hf, to_hf_weights=gemma_weights, unsupported=unsupported,
    export_config=export_config, norms_per_layer=4, qk_norm=True, tp_dims=tp_dims,
    lora_projections=GEMMA_PROJECTIONS, patches=("compute_dtype",))
