"""The numerics of the trained model: mixed precision and training-only remat (process-wide
patches of Tunix's classes, listed with why in tunix_names.PATCHES), and the pad token.

- Mixed precision (model.param_dtype vs model.dtype, as MaxText's weight_dtype vs dtype): weights
  and AdamW's moments stay float32, the forward computes in model.dtype. A bf16 weight has 8
  mantissa bits: on SmolLM2-135M one AdamW step at lr 5e-6 changed 0.98% of its bf16 weights,
  and bf16 RL stayed at 0.000 held-out accuracy where float32 reached 0.750.
- Remat (train.remat): Tunix's RematConfig.DECODER crashed inside the sampler (a KV cache
  through the rematerialized layer), so each decoder layer is wrapped in jax.checkpoint only
  when called without a cache: the training and log-prob forwards.
- Pad token: Tunix masks prompts as `tokens != pad_id`, and an HF tokenizer without a pad gets
  pad = eos, for chat models the end-of-turn token (SmolLM2: <|im_end|>, twice in every chat
  prompt), never attended to then. `dedicated_pad` picks a special token no prompt contains.
"""

from __future__ import annotations

import functools
import importlib
import inspect
from typing import Any, Iterable

from rlexp.families import ModelFamily, get

# jax, flax (1.9 s) and Tunix's modules are imported where a patch is applied.

# train.remat -> jax.checkpoint policy (None = save nothing: recompute the whole layer).
REMAT_POLICIES = {"full": None, "dots_saveable": "dots_with_no_batch_dims_saveable"}


def jnp_dtype(name: str) -> Any:
    import jax.numpy as jnp

    return jnp.bfloat16 if name == "bfloat16" else jnp.float32


def tunix_module(family: ModelFamily) -> Any:
    return importlib.import_module(f"{family.tunix_package}.model")


def use_training_remat(family: str, remat: str) -> None:
    """Remat `family`'s DecoderLayer when called without a KV cache (found by name), or undo."""

    layer = tunix_module(get(family)).DecoderLayer
    original = layer.__dict__.get("_rlexp_call") or layer.__call__
    layer._rlexp_call = original
    if remat == "none":
        layer.__call__ = original
        return
    import jax
    from flax import nnx

    name = REMAT_POLICIES[remat]
    policy = getattr(jax.checkpoint_policies, name) if name else None
    signature = inspect.signature(original)

    @functools.wraps(original)
    def call(self: Any, *args: Any, **kw: Any) -> Any:
        bound = signature.bind(self, *args, **kw)
        if bound.arguments.get("cache") is not None:  # sampler prefill/decode: never remat
            return original(self, *args, **kw)  # (Tunix's crash)
        block = nnx.remat(type(self).block, policy=policy)
        return block(*bound.args)

    layer.__call__ = call


def use_compute_dtype(family: str, dtype: str, param_dtype: str) -> None:
    """Tunix 0.1.7's llama3 and gemma3 compute in their weights' dtype: with float32 weights and
    model.dtype=bfloat16, cast them on entry (gradients flow back through the cast) and size the
    sampler's KV cache in bfloat16; a no-op where the family's patches lack compute_dtype."""
    fam = get(family)
    if "compute_dtype" not in fam.patches:
        return
    from tunix.generate import sampler as sampler_lib

    cls, samp = getattr(tunix_module(fam), fam.model_class), sampler_lib.Sampler
    original = cls.__dict__.get("_rlexp_call") or cls.__call__
    cls._rlexp_call = original
    original_dtype = samp.__dict__.get("_rlexp_dtype") or samp.dtype
    samp._rlexp_dtype = original_dtype
    if dtype == param_dtype:
        cls.__call__, samp.dtype = original, original_dtype
        return
    import jax
    import jax.numpy as jnp
    from flax import nnx

    low = jnp_dtype(dtype)

    def cast(x: Any) -> Any:
        return x.astype(low) if jnp.issubdtype(x.dtype, jnp.floating) else x

    @functools.wraps(original)
    def call(self: Any, *args: Any, **kw: Any) -> Any:
        graph, params, rest = nnx.split(self, nnx.Param, ...)
        return original(nnx.merge(graph, jax.tree.map(cast, params), rest), *args, **kw)

    cls.__call__ = call
    samp.dtype = property(lambda self: low)


def dedicated_pad(tokenizer: Any, prompts: Iterable[list[int]]) -> int | None:
    """Give an HF tokenizer a pad token that no prompt contains (its own when that is neither
    eos nor in a prompt, else the first such special token, then the last id); returns its id,
    None for tokenizers that are not HF tokenizers."""
    if not hasattr(tokenizer, "pad_token_id") or not hasattr(tokenizer, "convert_ids_to_tokens"):
        return None
    avoid = ({int(t) for ids in prompts for t in ids}
             | {tokenizer.eos_token_id, tokenizer.bos_token_id})
    pad = tokenizer.pad_token_id
    if pad is not None and pad not in avoid:
        return pad
    specials = sorted(getattr(tokenizer, "all_special_ids", []) or [])
    n = len(tokenizer)
    for cand in [*specials, *(getattr(tokenizer, "added_tokens_decoder", {}) or {}), n - 1]:
        if cand not in avoid and 0 <= cand < n:
            tokenizer.pad_token = tokenizer.convert_ids_to_tokens(int(cand))
            return int(cand)
    return pad
