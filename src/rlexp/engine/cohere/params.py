"""Hugging Face safetensors -> the Cohere model, through Tunix's generic loader
(tunix/models/safetensors_loader.py, as tunix/models/llama3/params.py uses it). q/k rows are read
as they are: the model rotates adjacent pairs as transformers does."""

from __future__ import annotations

from typing import Any

from rlexp.engine.cohere import model as model_lib


def _get_key_and_transform_mapping(cfg: model_lib.ModelConfig) -> dict[str, Any]:
    """HF name pattern -> (model name, (transpose, reshape) or None)."""
    D, N, K, H = cfg.embed_dim, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
    layer = r"model\.layers\.([0-9]+)\."
    return {
        r"model\.embed_tokens\.weight": ("embedder.input_embedding", None),
        layer + r"self_attn\.q_proj\.weight": (r"layers.\1.attn.q_proj.w", ((1, 0), (D, N, H))),
        layer + r"self_attn\.k_proj\.weight": (r"layers.\1.attn.k_proj.w", ((1, 0), (D, K, H))),
        layer + r"self_attn\.v_proj\.weight": (r"layers.\1.attn.v_proj.w", ((1, 0), (D, K, H))),
        layer + r"self_attn\.o_proj\.weight": (r"layers.\1.attn.o_proj.w", ((1, 0), (N, H, D))),
        layer + r"self_attn\.q_norm\.weight": (r"layers.\1.attn.q_norm.w", None),  # [N, H]
        layer + r"self_attn\.k_norm\.weight": (r"layers.\1.attn.k_norm.w", None),  # [K, H]
        layer + r"mlp\.gate_proj\.weight": (r"layers.\1.mlp.gate_proj.kernel", ((1, 0), None)),
        layer + r"mlp\.up_proj\.weight": (r"layers.\1.mlp.up_proj.kernel", ((1, 0), None)),
        layer + r"mlp\.down_proj\.weight": (r"layers.\1.mlp.down_proj.kernel", ((1, 0), None)),
        layer + r"input_layernorm\.weight": (r"layers.\1.input_layernorm.w", None),
        r"model\.norm\.weight": ("final_norm.w", None),
        r"lm_head\.weight": ("lm_head.w", ((1, 0), None)),
    }


def create_model_from_safe_tensors(file_dir: str, config: model_lib.ModelConfig,
                                   mesh: Any = None, dtype: Any = None,
                                   mode: str = "auto") -> model_lib.Cohere:
    """The Cohere model with the safetensors of `file_dir` (Tunix's loader signature)."""
    from tunix.models import safetensors_loader

    return safetensors_loader.load_and_create_model(
        file_dir=file_dir, model_class=model_lib.Cohere, config=config,
        key_mapping=_get_key_and_transform_mapping, mesh=mesh, preprocess_fn=None, dtype=dtype,
        mode=mode)
