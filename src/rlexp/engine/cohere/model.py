"""The Cohere decoder (transformers' CohereForCausalLM) on Tunix's model interface, laid out as
Tunix 0.1.7's llama3 and qwen3 (tunix/models/{llama3,qwen3}/model.py), so the sampler, log-prob
code, remat, LoRA (qwix) and export see the same names and call signature; Einsum, Embedder,
shard, RematConfig, ShardingConfig and the cache layout are qwen3's own. Weights are kept in
param_dtype, the forward computes in dtype, the RoPE base is the config's."""

from __future__ import annotations

import dataclasses
from typing import Tuple

import jax
import jaxtyping
from flax import nnx
from jax import numpy as jnp
from tunix.models.qwen3.model import (  # importing it also sets up Tunix's sharding environment
    K_MASK, Cache, Einsum, Embedder, LayerCache, RematConfig, ShardingConfig, shard)
from tunix.utils import compat


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """A Cohere decoder (config.json's numbers, named as Tunix's llama3 config)."""

    num_layers: int
    vocab_size: int
    embed_dim: int
    hidden_dim: int
    num_heads: int
    head_dim: int
    num_kv_heads: int
    rope_theta: float
    norm_eps: float
    logit_scale: float
    use_qk_norm: bool = False
    weight_tying: bool = True
    shd_config: ShardingConfig = ShardingConfig.get_default_sharding()
    remat_config: RematConfig = RematConfig.NONE
    dtype: jnp.dtype = jnp.float32
    param_dtype: jnp.dtype = jnp.float32


def apply_rope(inputs: jaxtyping.Array, positions: jaxtyping.Array, head_dim: int,
               rope_theta: float) -> jaxtyping.Array:
    """RoPE on [B, T, N, H] rotating adjacent pairs (x[2i], x[2i+1]) by position * theta^(-2i/H):
    Cohere's repeat_interleave layout, where Llama rotates the two halves. In float32, as
    transformers' apply_rotary_pos_emb."""
    fraction = 2 * jnp.arange(0, head_dim // 2, dtype=jnp.float32) / head_dim
    timescale = rope_theta ** fraction
    angle = positions[..., jnp.newaxis].astype(jnp.float32) / timescale  # [B, T, H/2]
    sin = jnp.sin(angle)[..., jnp.newaxis, :]  # [B, T, 1, H/2]
    cos = jnp.cos(angle)[..., jnp.newaxis, :]
    x = inputs.astype(jnp.float32)
    even, odd = x[..., 0::2], x[..., 1::2]
    out = jnp.stack([even * cos - odd * sin, odd * cos + even * sin], axis=-1)
    return out.reshape(inputs.shape).astype(inputs.dtype)


class LayerNorm(nnx.Module):
    """CohereLayerNorm: (x - mean) / sqrt(var + eps) * w over the last axis, in float32, no
    bias. `shape` is (embed_dim,), or (heads, head_dim) for the per-head q/k norms."""

    def __init__(self, shape: Tuple[int, ...], *, norm_eps: float, rngs: nnx.Rngs,
                 sharding: Tuple[str | None, ...], param_dtype: jnp.dtype):
        self.w = nnx.Param(nnx.initializers.ones_init()(rngs.params(), shape, param_dtype),
                           sharding=sharding)
        self.norm_eps = norm_eps

    @jax.named_scope("layer_norm")
    def __call__(self, x: jaxtyping.Array) -> jaxtyping.Array:
        dtype = x.dtype
        x = x.astype(jnp.float32)
        mean = jnp.mean(x, axis=-1, keepdims=True)
        var = jnp.mean(jnp.square(x - mean), axis=-1, keepdims=True)
        y = (x - mean) * jax.lax.rsqrt(var + self.norm_eps)
        return (self.w[...].astype(jnp.float32) * y).astype(dtype)


class Attention(nnx.Module):
    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.shd_config = s = config.shd_config
        D, N, K, H = config.embed_dim, config.num_heads, config.num_kv_heads, config.head_dim
        kw = dict(rngs=rngs, dtype=config.dtype, param_dtype=config.param_dtype)
        self.q_proj = Einsum("BTD,DNH->BTNH", (D, N, H), sharding=s.q_weight_dnh, **kw)
        self.k_proj = Einsum("BSD,DKH->BSKH", (D, K, H), sharding=s.kv_weight_dnh, **kw)
        self.v_proj = Einsum("BSD,DKH->BSKH", (D, K, H), sharding=s.kv_weight_dnh, **kw)
        self.o_proj = Einsum("BTNH,NHD->BTD", (N, H, D), sharding=s.o_weight_nhd, **kw)
        if config.use_qk_norm:
            norm = dict(norm_eps=config.norm_eps, rngs=rngs, param_dtype=config.param_dtype,
                        sharding=(*s.rms_norm_weight, None))  # [heads, head_dim]
            self.q_norm = LayerNorm((N, H), **norm)
            self.k_norm = LayerNorm((K, H), **norm)
        self.scale = H ** -0.5

    def block(self, x: jaxtyping.Array, segment_pos: jaxtyping.Array, cache: LayerCache | None,
              attn_mask: jaxtyping.Array | None) -> tuple[LayerCache | None, jaxtyping.Array]:
        cfg, seq_len = self.config, x.shape[1]
        q = shard(self.q_proj(x), self.shd_config.act_btnh)
        k = shard(self.k_proj(x), self.shd_config.act_btnh)
        v = shard(self.v_proj(x), self.shd_config.act_btnh)
        if cfg.use_qk_norm:  # before RoPE, as transformers' CohereAttention
            q, k = self.q_norm(q), self.k_norm(k)
        q = apply_rope(q, segment_pos, cfg.head_dim, cfg.rope_theta)
        k = apply_rope(k, segment_pos, cfg.head_dim, cfg.rope_theta)

        if cache is not None:
            end_index = cache["end_index"][0]
            at = (0, end_index % cache["v"].shape[1], 0, 0)
            v = jax.lax.dynamic_update_slice(cache["v"], v.astype(cache["v"].dtype), at)
            k = jax.lax.dynamic_update_slice(cache["k"], k.astype(cache["k"].dtype), at)

        b, t, qh, d = q.shape
        _, s, kh, _ = k.shape
        q = q.reshape((b, t, kh, qh // kh, d))  # grouped-query attention
        logits = jnp.einsum("BTHGD,BSHD->BHGTS", q, k.astype(q.dtype)) * self.scale
        logits = logits.reshape((b, qh, t, s))
        if attn_mask is not None:
            logits = jnp.where(jnp.expand_dims(attn_mask, -3), logits, K_MASK)
        probs = jax.nn.softmax(logits.astype(jnp.float32), axis=-1).astype(q.dtype)
        probs = probs.reshape((b, kh, qh // kh, t, s))
        out = jnp.einsum("BHGTS,BSHD->BTHGD", probs, v.astype(q.dtype)).reshape((b, t, qh, d))
        out = shard(self.o_proj(out), self.shd_config.act_btd)
        new_cache = None if cache is None else {
            "v": v, "k": k, "end_index": cache["end_index"] + seq_len}
        return new_cache, out

    @jax.named_scope("attention")
    def __call__(self, x: jaxtyping.Array, segment_pos: jaxtyping.Array,
                 cache: LayerCache | None, attn_mask: jaxtyping.Array | None
                 ) -> tuple[LayerCache | None, jaxtyping.Array]:
        if self.config.remat_config == RematConfig.BLOCK:
            return nnx.remat(type(self).block)(self, x, segment_pos, cache, attn_mask)
        return self.block(x, segment_pos, cache, attn_mask)


class MLP(nnx.Module):
    """SwiGLU: down(silu(gate(x)) * up(x)), no biases."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config = config
        s = config.shd_config
        kw = dict(use_bias=False, rngs=rngs, dtype=config.dtype, param_dtype=config.param_dtype)
        init = nnx.initializers.lecun_normal()
        self.gate_proj = nnx.Linear(config.embed_dim, config.hidden_dim,
                                    kernel_init=nnx.with_partitioning(init, s.ffw_weight_df), **kw)
        self.up_proj = nnx.Linear(config.embed_dim, config.hidden_dim,
                                  kernel_init=nnx.with_partitioning(init, s.ffw_weight_df), **kw)
        self.down_proj = nnx.Linear(config.hidden_dim, config.embed_dim,
                                    kernel_init=nnx.with_partitioning(init, s.ffw_weight_fd), **kw)

    def block(self, x: jaxtyping.Array) -> jaxtyping.Array:
        h = nnx.silu(self.gate_proj(x)) * self.up_proj(x)
        return self.down_proj(shard(h, self.config.shd_config.act_btf))

    @jax.named_scope("feed_forward")
    def __call__(self, x: jaxtyping.Array) -> jaxtyping.Array:
        if self.config.remat_config == RematConfig.BLOCK:
            return nnx.remat(type(self).block)(self, x)
        return self.block(x)


class DecoderLayer(nnx.Module):
    """Parallel block: x + attn(norm(x)) + mlp(norm(x)), one LayerNorm (CohereDecoderLayer)."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config = config
        self.input_layernorm = LayerNorm((config.embed_dim,), norm_eps=config.norm_eps,
                                         rngs=rngs, sharding=config.shd_config.rms_norm_weight,
                                         param_dtype=config.param_dtype)
        self.attn = Attention(config, rngs=rngs)
        self.mlp = MLP(config, rngs=rngs)

    def block(self, x: jaxtyping.Array, segment_pos: jaxtyping.Array, cache: LayerCache | None,
              attn_mask: jaxtyping.Array | None) -> tuple[LayerCache | None, jaxtyping.Array]:
        normed = self.input_layernorm(x)
        cache, attn = self.attn(normed, segment_pos, cache, attn_mask)
        return cache, x + attn + self.mlp(normed)

    def __call__(self, x: jaxtyping.Array, segment_pos: jaxtyping.Array,
                 cache: LayerCache | None, attn_mask: jaxtyping.Array | None
                 ) -> tuple[LayerCache | None, jaxtyping.Array]:
        if self.config.remat_config == RematConfig.DECODER:
            return nnx.remat(type(self).block)(self, x, segment_pos, cache, attn_mask)
        return self.block(x, segment_pos, cache, attn_mask)


class Cohere(nnx.Module):
    """CohereForCausalLM: embed, decoder layers, final LayerNorm, (tied) head, logit_scale."""

    def __init__(self, config: ModelConfig, *, rngs: nnx.Rngs):
        self.config = config
        s = config.shd_config
        self.embedder = Embedder(config.vocab_size, config.embed_dim, rngs=rngs, shd_config=s,
                                 dtype=config.dtype, param_dtype=config.param_dtype)
        self.layers = compat.ModuleList([DecoderLayer(config, rngs=rngs)
                                         for _ in range(config.num_layers)])
        self.final_norm = LayerNorm((config.embed_dim,), norm_eps=config.norm_eps, rngs=rngs,
                                    sharding=s.rms_norm_weight, param_dtype=config.param_dtype)
        if not config.weight_tying:
            self.lm_head = Einsum("BTD,DV->BTV", (config.embed_dim, config.vocab_size),
                                  rngs=rngs, sharding=s.emb_dv, dtype=config.dtype,
                                  param_dtype=config.param_dtype)

    def init_cache(self, batch_size: int, cache_size: int, dtype: jnp.dtype) -> Cache:
        """The sampler's KV cache (Tunix's layout: k, v, end_index per layer)."""
        c = self.config
        shape = (batch_size, cache_size, c.num_kv_heads, c.head_dim)
        return {f"layer_{i}": {"k": jnp.zeros(shape, dtype), "v": jnp.zeros(shape, dtype),
                               "end_index": jnp.zeros((batch_size,), jnp.int32)}
                for i in range(c.num_layers)}

    def __call__(self, input_tokens: jaxtyping.Array, positions: jaxtyping.Array,
                 cache: Cache | None, attention_mask: jaxtyping.Array,
                 output_hidden_states: bool = False) -> tuple[jaxtyping.Array, Cache | None]:
        """[B, L] tokens, positions, cache|None, [B, L, L'] mask -> ([B, L, V] logits, cache)."""
        new_cache = None if cache is None else {}
        x = self.embedder.encode(input_tokens)
        for i, layer in enumerate(self.layers):
            name = f"layer_{i}"
            layer_cache, x = layer(x, positions, cache[name] if cache else None, attention_mask)
            if new_cache is not None:
                new_cache[name] = layer_cache
        x = self.final_norm(x)
        if output_hidden_states:
            self.sow(nnx.Intermediate, "all_hidden_states", x)
        logits = self.embedder.decode(x) if self.config.weight_tying else self.lm_head(x)
        # transformers multiplies the head's output by logit_scale (aya-expanse-8b: 0.125).
        return logits.astype(jnp.float32) * self.config.logit_scale, new_cache

    @property
    def num_embed(self) -> int:
        """Width of the sampler's logits buffer (the vocabulary)."""
        return self.config.vocab_size

    def get_model_input(self) -> dict:
        """A dummy input (Tunix's models have it; batch 2 splits over a 2-device fsdp axis)."""
        return {"input_tokens": jnp.ones((2, 1), jnp.int32),
                "positions": jnp.ones((2, 1), jnp.int32), "cache": None,
                "attention_mask": jnp.ones((2, 1, 1), jnp.bool_)}
