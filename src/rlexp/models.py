"""Model and tokenizer construction (Tunix model code; heavy imports stay inside functions).

tiny: a small Qwen3-shaped tunix.models.qwen3 decoder, random init, with the built-in
character tokenizer. model.path: local Hugging Face safetensors + config.json (+ tokenizer
files) for the qwen3 and llama3 families, loaded with Tunix's
`params.create_model_from_safe_tensors`; the architecture numbers in conf/model/*.yaml must
agree with config.json (they size the plan).
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

from rlexp.config import ModelConfig
from rlexp.errors import UserError
from rlexp.tokenizer import MIN_VOCAB, CharTokenizer

log = logging.getLogger(__name__)

# config.json key -> (our field, converter): what must agree between the YAML and the weights.
_HF_KEYS = {
    "num_hidden_layers": "num_layers", "hidden_size": "embed_dim",
    "num_attention_heads": "num_heads", "num_key_value_heads": "num_kv_heads",
    "intermediate_size": "hidden_dim", "vocab_size": "vocab_size",
}


# model.family -> config.json's model_type.
_MODEL_TYPES = {"qwen3": "qwen3", "llama3": "llama"}


def model_dir(m: ModelConfig) -> Path | None:
    """model.path as a checked directory with config.json and *.safetensors; None for random init."""
    if m.path is None:
        return None
    path = Path(m.path).expanduser()
    if not path.is_dir():
        raise UserError(f"model.path={m.path}: directory not found")
    if not (path / "config.json").is_file():
        raise UserError(f"model.path={m.path}: no config.json (need a Hugging Face checkpoint dir)")
    if not any(path.glob("*.safetensors")):
        raise UserError(f"model.path={m.path}: no *.safetensors weights in the directory")
    return path


def check_hf_config(m: ModelConfig, path: Path) -> dict[str, Any]:
    """config.json must describe the architecture the YAML declares."""
    try:
        hf = json.loads((path / "config.json").read_text())
    except ValueError as exc:
        raise UserError(f"model.path={m.path}: config.json is not valid JSON ({exc})") from None
    model_type = str(hf.get("model_type", ""))
    if model_type and _MODEL_TYPES[m.family] != model_type:
        # Tunix's loader skips keys it does not know: a wrong family would load silently.
        raise UserError(f"model.family={m.family} but {path}/config.json has "
                        f"model_type={model_type}; valid choices are "
                        f"{', '.join(f for f, t in _MODEL_TYPES.items() if t == model_type) or 'none'}")
    for hf_key, ours in _HF_KEYS.items():
        if hf_key in hf and int(hf[hf_key]) != getattr(m, ours):
            raise UserError(f"model.{ours}={getattr(m, ours)} but {path}/config.json has "
                            f"{hf_key}={hf[hf_key]}; fix conf/model/{m.name}.yaml")
    hd = hf.get("head_dim") or hf.get("hidden_size", 0) // max(hf.get("num_attention_heads", 1), 1)
    if hd and int(hd) != m.head_dim:
        raise UserError(f"model.head_dim={m.head_dim} but {path}/config.json implies head_dim={hd}")
    return hf


def build_tokenizer(m: ModelConfig) -> Any:
    """CharTokenizer (tokenizer=char) or a Hugging Face tokenizer from model.path."""
    if m.tokenizer == "char":
        if m.vocab_size < MIN_VOCAB:
            raise UserError(f"model.vocab_size={m.vocab_size}: the char tokenizer needs >= {MIN_VOCAB}")
        return CharTokenizer(m.vocab_size)
    if m.path is None:
        raise UserError("model.tokenizer=hf needs model.path=<dir with tokenizer.json>")
    path = Path(m.path).expanduser()
    if not (path / "tokenizer.json").is_file() and not (path / "tokenizer.model").is_file():
        raise UserError(f"model.path={m.path}: no tokenizer.json (needed by model.tokenizer=hf)")
    import os

    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    from transformers import AutoTokenizer

    try:
        return AutoTokenizer.from_pretrained(str(path), local_files_only=True)
    except Exception as exc:
        raise UserError(f"model.path={m.path}: cannot load the tokenizer "
                        f"({type(exc).__name__}: {str(exc).splitlines()[0][:120]})") from None


def tunix_config(m: ModelConfig, remat: str = "NONE") -> Any:
    """The Tunix ModelConfig of the family. remat is never DECODER (crashes in the sampler)."""
    import jax.numpy as jnp

    dtype = jnp.bfloat16 if m.dtype == "bfloat16" else jnp.float32
    common = dict(num_layers=m.num_layers, vocab_size=m.vocab_size, embed_dim=m.embed_dim,
                  hidden_dim=m.hidden_dim, num_heads=m.num_heads, head_dim=m.head_dim,
                  num_kv_heads=m.num_kv_heads, rope_theta=int(m.rope_theta), norm_eps=m.norm_eps)
    if m.family == "qwen3":
        from tunix.models.qwen3 import model as qwen3

        return qwen3.ModelConfig(**common, use_tied_embedding=m.tie_embeddings,
                                 remat_config=getattr(qwen3.RematConfig, remat),
                                 dtype=dtype, param_dtype=dtype)
    from tunix.models.llama3 import model as llama3

    return llama3.ModelConfig(**common, weight_tying=m.tie_embeddings,
                              remat_config=getattr(llama3.RematConfig, remat))


# Tunix 0.1.7's qwen3 and llama3 attention call apply_rope() without the config's theta, so
# RoPE always uses this base whatever the config says (right for Qwen3, not for Llama 3.1 or
# SmolLM2): `use_rope_theta` binds the model's theta into the module before it is traced.
TUNIX_ROPE_THETA = 1_000_000.0


def use_rope_theta(m: ModelConfig) -> None:
    """Make Tunix's `apply_rope` of model.family use model.rope_theta (idempotent)."""
    import functools
    import importlib

    module = importlib.import_module(f"tunix.models.{m.family}.model")
    original = module.__dict__.setdefault("_rlexp_apply_rope", module.apply_rope)
    module.apply_rope = (original if m.rope_theta == TUNIX_ROPE_THETA
                         else functools.partial(original, rope_theta=m.rope_theta))


def resolve_path(m: ModelConfig, cache_dir: str) -> None:
    """Models shipped in a package get their path here (smollm2-135m: converted once)."""
    if m.path is None and m.name == "smollm2-135m":
        from rlexp.smollm2 import ensure_converted

        m.path = str(ensure_converted(cache_dir))


def build_model(m: ModelConfig, mesh: Any, seed: int) -> Any:
    """The policy model: loaded from model.path, or randomly initialised (seeded)."""
    path = model_dir(m)
    use_rope_theta(m)
    config = tunix_config(m)
    if path is not None:
        check_hf_config(m, path)
        import jax.numpy as jnp

        dtype = jnp.bfloat16 if m.dtype == "bfloat16" else jnp.float32
        if m.family == "qwen3":
            from tunix.models.qwen3 import params
        else:
            from tunix.models.llama3 import params
        try:
            return params.create_model_from_safe_tensors(str(path), config, mesh, dtype=dtype)
        except (KeyError, ValueError) as exc:
            raise UserError(f"model.path={m.path}: weights do not match model.family={m.family} "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0][:160]})") from None
    if m.family != "qwen3":
        raise UserError(f"model.path is null: random init is only for the qwen3 family "
                        f"(tiny); model.family={m.family} needs model.path")
    from flax import nnx
    from tunix.models.qwen3 import model as qwen3

    model = qwen3.Qwen3(config, rngs=nnx.Rngs(seed))
    _init_mlp(model, seed)
    return model


def _init_mlp(model: Any, seed: int) -> None:
    """Tunix's qwen3 MLP initialises its kernels to zeros (made for loading weights); a
    random-init model needs them random or every MLP is dead at the start."""
    import jax
    from flax import nnx

    key = jax.random.PRNGKey(seed + 1)
    init = nnx.initializers.lecun_normal()
    for i, layer in enumerate(model.layers):
        for j, lin in enumerate((layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)):
            k = jax.random.fold_in(key, 3 * i + j)
            lin.kernel.value = init(k, lin.kernel.value.shape, lin.kernel.value.dtype)


def clone(model: Any) -> Any:
    """An independent copy (the reference model must not follow the policy's updates)."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    graph, state = nnx.split(model)
    return nnx.merge(graph, jax.tree.map(jnp.copy, state))
