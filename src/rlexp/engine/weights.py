"""An nnx model's parameters as one flat {name: array} dict, and back (the warm-start cache,
the policy snapshot and run.init_from read and write weights through it)."""

from __future__ import annotations

from typing import Any

# Imported inside functions, on purpose: jax and flax (1.9 s) are imported where used: pre-flight
# imports rlexp.engine and never needs them.


def flatten(tree: dict, sep: str = "/", prefix: str = "") -> dict[str, Any]:
    """Nested dict -> {"layers/0/attn/q_proj/w": leaf, ...}."""
    out: dict[str, Any] = {}
    for k, v in tree.items():
        if isinstance(v, dict):
            out.update(flatten(v, sep, f"{prefix}{k}{sep}"))
        else:
            out[f"{prefix}{k}"] = v
    return out


def unflatten(flat: dict[str, Any], like: dict, sep: str = "/", prefix: str = "") -> dict:
    """flatten's inverse, shaped like the nested dict `like` (every name must be in `flat`)."""
    return {k: unflatten(flat, v, sep, f"{prefix}{k}{sep}") if isinstance(v, dict)
            else flat[f"{prefix}{k}"] for k, v in like.items()}


def params(model: Any, sep: str = "/") -> dict[str, Any]:
    """The model's parameters (live arrays) by flat name."""
    from flax import nnx

    return flatten(nnx.state(model, nnx.Param).to_pure_dict(), sep)


def assign(model: Any, flat: dict[str, Any], sep: str = "/") -> None:
    """Set every parameter of `model` from `flat` (same names), cast to the model's dtypes."""
    import jax.numpy as jnp
    from flax import nnx

    state = nnx.state(model, nnx.Param)
    like = state.to_pure_dict()
    cast = {k: jnp.asarray(flat[k], dtype=v.dtype) for k, v in flatten(like, sep).items()}
    state.replace_by_pure_dict(unflatten(cast, like, sep))
    nnx.update(model, state)
