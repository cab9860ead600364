"""The policy model as a Tunix module: the family's Tunix config, the RoPE-theta patch, random
init (tiny) or the family's Tunix loader on model.path's safetensors, and clone.
"""

from __future__ import annotations

import functools
import importlib
from typing import Any

from rlexp.base.errors import UserError
from rlexp.config.schema import ModelConfig
from rlexp.engine.tunix_patches import jnp_dtype, tunix_module, use_compute_dtype
from rlexp.families import ModelFamily, get
from rlexp.inputs.model_files import check_hf_config, model_dir

# Imported inside functions, on purpose: jax, flax (1.9 s) and Tunix's model modules are imported
# where a model is built: pre-flight imports rlexp.engine and never needs them.


def tunix_loader(family: ModelFamily) -> Any:
    return importlib.import_module(f"{family.tunix_package}.{family.loader_module}")


def tunix_config(m: ModelConfig) -> Any:
    """The Tunix ModelConfig of the family. Its remat is NONE: DECODER crashes in the sampler.
    Weights (and so AdamW's moments) in model.param_dtype, compute in model.dtype."""
    family = get(m.family)
    return family.tunix_config(tunix_module(family), m, "NONE", jnp_dtype(m.dtype),
                               jnp_dtype(m.param_dtype))


# Tunix 0.1.7's qwen3 and llama3 attention call apply_rope() without the config's theta (right
# for Qwen3, not Llama 3.1 or SmolLM2): `use_rope_theta` binds it into the module before tracing.
TUNIX_ROPE_THETA = 1_000_000.0


def use_rope_theta(m: ModelConfig) -> None:
    """Bind model.rope_theta into Tunix's `apply_rope` (families that patch it; idempotent)."""
    family = get(m.family)
    if "rope_theta" not in family.patches:
        return
    module = tunix_module(family)
    original = module.__dict__.setdefault("_rlexp_apply_rope", module.apply_rope)
    module.apply_rope = (original if m.rope_theta == TUNIX_ROPE_THETA
                         else functools.partial(original, rope_theta=m.rope_theta))


def build_model(m: ModelConfig, mesh: Any, seed: int, abstract: bool = False) -> Any:
    """The policy model: loaded from model.path, or randomly initialised (seeded). `abstract`:
    a random-init model's shapes only (nnx.eval_shape), for weights that are assigned next
    (a cached warm start): the eager init is ~40 small programs to trace, lower and load. A
    model from model.path loads its weights either way."""
    family = get(m.family)
    path = model_dir(m)
    use_rope_theta(m)
    use_compute_dtype(m.family, m.dtype, m.param_dtype)  # process-wide: set for this model
    config = tunix_config(m)
    if path is not None:
        check_hf_config(m, path)
        try:
            return tunix_loader(family).create_model_from_safe_tensors(
                str(path), config, mesh, dtype=jnp_dtype(m.param_dtype))
        except (KeyError, ValueError) as exc:
            raise UserError(f"model.path={m.path}: weights do not match model.family={m.family} "
                            f"({type(exc).__name__}: {str(exc).splitlines()[0][:160]})") from None
    if not family.random_init:
        raise UserError(f"model.path is null: random init is only for the tiny model; "
                        f"model.family={m.family} needs model.path")
    import jax
    from flax import nnx

    model_class = getattr(tunix_module(family), family.model_class)
    if abstract:
        return nnx.eval_shape(lambda: model_class(config, rngs=nnx.Rngs(seed)))
    model = model_class(config, rngs=nnx.Rngs(seed))
    # Tunix's MLPs initialise their kernels to zeros (made for loading weights): random ones,
    # or every MLP of a random-init model is dead at the start.
    key = jax.random.PRNGKey(seed + 1)
    init = nnx.initializers.lecun_normal()
    for i, layer in enumerate(model.layers):
        for j, lin in enumerate((layer.mlp.gate_proj, layer.mlp.up_proj, layer.mlp.down_proj)):
            k = jax.random.fold_in(key, 3 * i + j)
            lin.kernel.value = init(k, lin.kernel.value.shape, lin.kernel.value.dtype)
    return model


def clone(model: Any, dtype: str | None = None) -> Any:
    """An independent copy (the reference must not follow the policy), floats cast to `dtype`."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    low = None if dtype is None else jnp_dtype(dtype)

    def copy(x: Any) -> Any:
        # A fresh buffer either way: astype to the same dtype may hand back the same array.
        if low is not None and jnp.issubdtype(x.dtype, jnp.floating) and x.dtype != low:
            return x.astype(low)
        return jnp.copy(x)

    graph, state = nnx.split(model)
    return nnx.merge(graph, jax.tree.map(copy, state))
