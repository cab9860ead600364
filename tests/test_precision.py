"""Mixed precision (float32 master weights, bfloat16 compute), training-only remat and the
dedicated pad token (rlexp.engine.tunix_patches), on the tiny model and SmolLM2's tokenizer."""

from __future__ import annotations

import numpy as np
import pytest

from rlexp.config.schema import Config
from rlexp.config.validate import validate


def _tiny(dtype: str, param_dtype: str) -> Config:
    """One decoder layer: what these tests check acts per layer, and each update compiles
    its own program (bfloat16's on the CPU slowest), whose size grows with the layers."""
    c = Config()
    c.model.num_layers, c.model.embed_dim, c.model.hidden_dim = 1, 64, 128
    c.model.num_heads, c.model.num_kv_heads, c.model.head_dim = 4, 2, 16
    c.model.vocab_size, c.model.dtype, c.model.param_dtype = 128, dtype, param_dtype
    c.train.learning_rate, c.train.lr_schedule = 5e-6, "constant"
    c.train.grad_clip, c.train.weight_decay = 1.0, 0.0
    return validate(c)


def _one_update(cfg: Config, remat: str = "none"):
    """One AdamW step (the engine's optimizer) of a next-token loss on a fixed batch: returns
    the weights before, after and the gradient, as flat dicts of NumPy arrays."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from rlexp.engine import tunix_patches, tunix_adapter, tunix_models
    from rlexp.engine.weights import flatten

    tunix_patches.use_training_remat("qwen3", remat)
    try:
        model = tunix_models.build_model(cfg.model, None, seed=0)
        opt = nnx.Optimizer(model, tunix_adapter.optimizer(cfg), wrt=nnx.Param)
        tokens = jax.random.randint(jax.random.PRNGKey(1), (4, 12), 4, 100)
        pos = jnp.broadcast_to(jnp.arange(12), (4, 12))
        mask = jnp.tril(jnp.ones((12, 12), bool))[None].repeat(4, 0)

        def loss_fn(m):
            logits, _ = m(tokens, pos, None, mask)
            logp = jax.nn.log_softmax(logits[:, :-1].astype(jnp.float32))
            return -jnp.take_along_axis(logp, tokens[:, 1:, None], -1).mean()

        def flat(tree):
            return {k: np.asarray(v) for k, v in flatten(tree.to_pure_dict()).items()}

        @nnx.jit
        def step(model, opt):
            loss, grads = nnx.value_and_grad(loss_fn)(model)
            opt.update(model, grads)
            return loss, grads

        graph, params, rest = nnx.split(model, nnx.Param, ...)
        jaxpr = str(jax.make_jaxpr(jax.grad(
            lambda p: loss_fn(nnx.merge(graph, p, rest))))(params))
        # The backward pass rematerializes exactly when train.remat asks for it.
        assert ("checkpoint[" in jaxpr or "remat" in jaxpr) == (remat != "none")
        before = flat(nnx.state(model, nnx.Param))
        loss, grads = step(model, opt)
        return before, flat(nnx.state(model, nnx.Param)), flat(grads), float(loss)
    finally:
        tunix_patches.use_training_remat("qwen3", "none")


@pytest.mark.slow
def test_float32_master_changes_wherever_the_gradient_is_nonzero():
    before, after, grads, loss = _one_update(_tiny("bfloat16", "float32"))
    assert np.isfinite(loss)
    nonzero = changed = 0
    for name, g in grads.items():
        assert after[name].dtype == np.float32, name  # master weights stay float32
        moved = after[name] != before[name]
        np.testing.assert_array_equal(moved[g != 0], True, err_msg=name)
        nonzero, changed = nonzero + int((g != 0).sum()), changed + int(moved.sum())
        # The bfloat16 compute copy is the master rounded: it follows the update.
        import jax.numpy as jnp

        compute = np.asarray(jnp.asarray(after[name]).astype(jnp.bfloat16).astype(jnp.float32))
        np.testing.assert_allclose(compute, after[name], rtol=2**-8, atol=0)
    assert nonzero > 0.9 * sum(g.size for g in grads.values())
    # The same step on bfloat16 weights rounds almost every change away (the failure mode).
    b_before, b_after, b_grads, _ = _one_update(_tiny("bfloat16", "bfloat16"))
    moved = sum(int((b_after[k] != b_before[k])[b_grads[k] != 0].sum()) for k in b_grads)
    total = sum(int((b_grads[k] != 0).sum()) for k in b_grads)
    assert moved < 0.2 * total, (moved, total)


@pytest.mark.slow
def test_training_remat_gives_the_same_update_and_the_sampler_is_untouched():
    ref_before, ref_after, ref_grads, ref_loss = _one_update(_tiny("float32", "float32"))
    for remat in ("full", "dots_saveable"):
        _, after, grads, loss = _one_update(_tiny("float32", "float32"), remat)
        assert loss == pytest.approx(ref_loss, rel=1e-6)
        for name in ref_grads:
            scale = np.abs(ref_grads[name]).max()  # recomputation may reorder float sums
            np.testing.assert_allclose(grads[name], ref_grads[name], rtol=1e-3,
                                       atol=1e-4 * scale, err_msg=f"{remat} {name}")
    # With a KV cache (the sampler's prefill/decode) the original layer call runs.
    from tunix.models.qwen3 import model as qwen3

    from rlexp.engine import tunix_patches

    original = qwen3.DecoderLayer.__call__
    tunix_patches.use_training_remat("qwen3", "full")
    try:
        assert qwen3.DecoderLayer.__call__ is not original
        assert qwen3.DecoderLayer._rlexp_call is original
    finally:
        tunix_patches.use_training_remat("qwen3", "none")
    assert qwen3.DecoderLayer.__call__ is original


def test_reference_copy_is_cast_to_the_compute_dtype():
    from flax import nnx

    from rlexp.engine import tunix_models

    model = tunix_models.build_model(_tiny("bfloat16", "float32").model, None, seed=0)
    ref = tunix_models.clone(model, "bfloat16")
    p = jax_leaves(nnx.state(model, nnx.Param))
    r = jax_leaves(nnx.state(ref, nnx.Param))
    assert {str(x.dtype) for x in p} == {"float32"} and {str(x.dtype) for x in r} == {"bfloat16"}
    for a, b in zip(p, r):
        np.testing.assert_allclose(np.asarray(b, np.float32), np.asarray(a), rtol=2**-8)


def jax_leaves(state):
    import jax

    return jax.tree.leaves(state)


# ------------------------------------------------------------------------------ pad token


class _FakeHF:
    """The HF tokenizer surface dedicated_pad uses (pad = eos, as in SmolLM2)."""

    def __init__(self):
        self.vocab = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"] + [f"t{i}" for i in range(7)]
        self.pad_token_id, self.eos_token_id, self.bos_token_id = 2, 2, 1
        self.all_special_ids = [1, 2, 0]

    def __len__(self):
        return len(self.vocab)

    def convert_ids_to_tokens(self, i):
        return self.vocab[i]

    @property
    def pad_token(self):
        return self.vocab[self.pad_token_id]

    @pad_token.setter
    def pad_token(self, token):
        self.pad_token_id = self.vocab.index(token)


def test_dedicated_pad_avoids_every_prompt_token():
    from rlexp.engine.tunix_patches import dedicated_pad

    tok = _FakeHF()
    assert dedicated_pad(tok, [[1, 5, 2, 3, 2]]) == 0 and tok.pad_token_id == 0
    tok = _FakeHF()
    # <|endoftext|> in a prompt too: the last vocabulary id is the next candidate.
    assert dedicated_pad(tok, [[0, 1, 2, 5]]) == 9
    tok = _FakeHF()
    tok.pad_token_id = 7  # a pad of its own that no prompt contains is kept
    assert dedicated_pad(tok, [[1, 2, 3]]) == 7
    assert dedicated_pad(object(), [[1]]) is None  # not an HF tokenizer (char): unchanged


@pytest.mark.slow
def test_no_smollm2_prompt_token_is_masked_in_prefill(smollm2_dir):  # requires SmolLM2
    from tunix.generate.tokenizer_adapter import TokenizerAdapter

    from rlexp.inputs import model_files as models
    from rlexp.config.schema import ModelConfig
    from rlexp.data import PromptTemplate, build_splits, load_problems
    from rlexp.engine.tunix_patches import dedicated_pad

    m = ModelConfig(name="smollm2-135m", family="llama3", tokenizer="hf", chat_template=True,
                    path=str(smollm2_dir), vocab_size=49152)
    raw = models.build_tokenizer(m)
    tok = TokenizerAdapter(raw)
    assert tok.pad_id() == tok.eos_id() == 2  # as shipped: pad = eos = <|im_end|>
    cfg = Config()
    cfg.dataset.num_train, cfg.dataset.num_eval = 64, 16
    splits = build_splits(load_problems(cfg.dataset), PromptTemplate.from_config(cfg.dataset),
                          tok.encode, tok.decode, 127, raw)
    prompts = [tok.encode(e.prompt) for e in [*splits.train, *splits.eval]]
    assert any(2 in p for p in prompts)  # <|im_end|> closes every chat turn
    pad = dedicated_pad(raw, prompts)
    assert tok.pad_id() == pad != tok.eos_id()
    # Tunix's prefill mask is `tokens != pad_id`: every prompt token is attended to.
    for p in prompts:
        assert (np.asarray(p) != tok.pad_id()).all()


@pytest.mark.slow
def test_llama3_computes_in_bfloat16_on_float32_weights_and_samples():
    """Tunix's llama3 has no compute dtype: rlexp casts the float32 master weights to bfloat16
    on entry to the forward, gradients reach the float32 weights, and the sampler (KV cache
    sized in bfloat16) decodes with it, also with training remat on."""
    import jax
    import jax.numpy as jnp
    from flax import nnx
    from tunix.generate import sampler as sampler_lib
    from tunix.generate.tokenizer_adapter import TokenizerAdapter
    from tunix.models.llama3 import model as llama3

    from rlexp.inputs import model_files as rlexp_models
    from rlexp.engine import tunix_patches, tunix_models

    c = _tiny("bfloat16", "float32")
    c.model.family = "llama3"
    tunix_patches.use_compute_dtype("llama3", "bfloat16", "float32")
    tunix_patches.use_training_remat("llama3", "full")
    try:
        model = llama3.Llama3(tunix_models.tunix_config(c.model), rngs=nnx.Rngs(0))
        tokens = jnp.array([[5, 6, 7, 8]])
        pos, mask = jnp.arange(4)[None], jnp.tril(jnp.ones((4, 4), bool))[None]
        logits, _ = model(tokens, pos, None, mask)
        assert logits.dtype == jnp.bfloat16
        grads = nnx.grad(lambda m: m(tokens, pos, None, mask)[0].astype(jnp.float32).mean())(model)
        leaves = jax.tree.leaves(nnx.state(grads))
        assert {str(g.dtype) for g in leaves} == {"float32"}
        assert sum(int((np.asarray(g) != 0).sum()) for g in leaves) > 0
        tok = TokenizerAdapter(rlexp_models.build_tokenizer(c.model))
        sampler = sampler_lib.Sampler(model, tok, sampler_lib.CacheConfig(
            cache_size=32, num_layers=c.model.num_layers, num_kv_heads=2, head_dim=16))
        assert sampler.dtype == jnp.bfloat16
        out = sampler(["1 + 2 ="], max_generation_steps=4, max_prompt_length=16)
        assert len(out.text) == 1
    finally:
        tunix_patches.use_compute_dtype("llama3", "float32", "float32")
        tunix_patches.use_training_remat("llama3", "none")
    assert sampler_lib.Sampler.dtype is sampler_lib.Sampler._rlexp_dtype
