"""The policy model as a Tunix module: config mapping, the RoPE-theta patch, random init, clone.

tiny: a small Qwen3-shaped tunix.models.qwen3 decoder, random init. model.path: local Hugging
Face safetensors loaded with Tunix's `params.create_model_from_safe_tensors` after
rlexp.inputs.model_files checked the directory and config.json. Heavy imports stay inside functions.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from rlexp.base.errors import UserError
from rlexp.config.schema import ModelConfig
from rlexp.inputs.model_files import check_hf_config, model_dir

# Imported inside functions, on purpose: jax, flax (1.9 s) and Tunix's model modules are imported
# where a model is built: pre-flight imports rlexp.engine and never needs them.


def tunix_config(m: ModelConfig, remat: str = "NONE") -> Any:
    """The Tunix ModelConfig of the family. remat is never DECODER (crashes in the sampler)."""
    import jax.numpy as jnp

    dtype = jnp.bfloat16 if m.dtype == "bfloat16" else jnp.float32
    # Weights (and so AdamW's moments) in model.param_dtype, compute in model.dtype.
    param_dtype = jnp.bfloat16 if m.param_dtype == "bfloat16" else jnp.float32
    common = dict(num_layers=m.num_layers, vocab_size=m.vocab_size, embed_dim=m.embed_dim,
                  hidden_dim=m.hidden_dim, num_heads=m.num_heads, head_dim=m.head_dim,
                  num_kv_heads=m.num_kv_heads, rope_theta=int(m.rope_theta), norm_eps=m.norm_eps)
    if m.family == "qwen3":
        from tunix.models.qwen3 import model as qwen3

        return qwen3.ModelConfig(**common, use_tied_embedding=m.tie_embeddings,
                                 remat_config=getattr(qwen3.RematConfig, remat),
                                 dtype=dtype, param_dtype=param_dtype)
    from tunix.models.llama3 import model as llama3

    return llama3.ModelConfig(**common, weight_tying=m.tie_embeddings,
                              remat_config=getattr(llama3.RematConfig, remat))


# Tunix 0.1.7's qwen3 and llama3 attention call apply_rope() without the config's theta, so
# RoPE always uses this base whatever the config says (right for Qwen3, not for Llama 3.1 or
# SmolLM2): `use_rope_theta` binds the model's theta into the module before it is traced.
TUNIX_ROPE_THETA = 1_000_000.0


def use_rope_theta(m: ModelConfig) -> None:
    """Make Tunix's `apply_rope` of model.family use model.rope_theta (idempotent)."""

    module = importlib.import_module(f"tunix.models.{m.family}.model")
    original = module.__dict__.setdefault("_rlexp_apply_rope", module.apply_rope)
    module.apply_rope = (original if m.rope_theta == TUNIX_ROPE_THETA
                         else functools.partial(original, rope_theta=m.rope_theta))


def build_model(m: ModelConfig, mesh: Any, seed: int) -> Any:
    """The policy model: loaded from model.path, or randomly initialised (seeded)."""
    from rlexp.engine.tunix_patches import use_compute_dtype

    path = model_dir(m)
    use_rope_theta(m)
    use_compute_dtype(m.family, m.dtype, m.param_dtype)  # process-wide: set for this model
    config = tunix_config(m)
    if path is not None:
        check_hf_config(m, path)
        import jax.numpy as jnp

        # Loaded in the weights' dtype (model.param_dtype); qwen3 casts to model.dtype.
        dtype = jnp.bfloat16 if m.param_dtype == "bfloat16" else jnp.float32
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


def clone(model: Any, dtype: str | None = None) -> Any:
    """An independent copy (the reference model must not follow the policy's updates);
    with `dtype`, its floating-point weights cast to it (the reference is kept in model.dtype)."""
    if dtype is not None:
        from rlexp.engine.tunix_patches import cast_floats

        return cast_floats(model, dtype)
    import jax
    import jax.numpy as jnp
    from flax import nnx

    graph, state = nnx.split(model)
    return nnx.merge(graph, jax.tree.map(jnp.copy, state))
