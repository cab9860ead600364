"""Warm start: what its cache key covers and the supervised batch layout (no compile)."""

from __future__ import annotations

import numpy as np
import pytest

from rlexp.config.schema import Config
from rlexp.data import Example
from rlexp.inputs.tokenizer import BOS, EOS, PAD, CharTokenizer
from rlexp.engine.warm_start import cache_key, make_batch


def test_cache_key_covers_what_determines_the_weights():
    base = Config()
    key = cache_key(base)
    for change in (lambda c: setattr(c.model, "warm_start_steps", 7),
                   lambda c: setattr(c.model, "embed_dim", 32),
                   lambda c: setattr(c.dataset, "max_terms", 3),
                   lambda c: setattr(c.train, "seed", 1)):
        c = Config()
        change(c)
        assert cache_key(c) != key
    c = Config()
    c.algo.name, c.algo.beta, c.train.learning_rate = "gspo", 0.0, 1.0  # RL settings: shared
    assert cache_key(c) == key


def test_loaded_weights_share_one_warm_start_across_seeds():
    """train.seed draws a random-init model's weights (its key keeps the seed, above); loaded
    weights do not depend on it, and the warm start then reads its batches in a fixed order."""
    from rlexp.engine.warm_start import data_seed, seed_matters

    c = Config()
    c.model.path = "/models/qwen3-0.6b"  # never read by the key
    key = cache_key(c)
    c.train.seed = 7
    assert cache_key(c) == key and not seed_matters(c) and data_seed(c) == 0
    assert seed_matters(Config()) and data_seed(c) == 0


def test_cache_key_follows_the_contents_of_the_files_the_dataset_names(tmp_path):
    prompt, data = tmp_path / "prompt.txt", tmp_path / "train.jsonl"
    prompt.write_text("Solve: {question}")
    data.write_text('{"question": "1+1", "answer": "2"}\n')
    c = Config()
    c.dataset.prompt_file, c.dataset.path = str(prompt), str(data)
    key = cache_key(c)
    assert cache_key(c) == key
    prompt.write_text("Solve step by step: {question}")
    edited_prompt = cache_key(c)
    data.write_text('{"question": "1+2", "answer": "3"}\n')
    assert len({key, edited_prompt, cache_key(c)}) == 3


def test_batch_masks_only_the_completion_and_eos():
    tok = CharTokenizer(128)
    ex = Example(prompt="1+1=", answer="2", reference="<answer>2</answer>", question="1+1")
    b = make_batch(tok, [ex], length=30)
    ids, mask = b["ids"][0], b["loss_mask"][0]
    n_prompt, n_completion = 1 + 4, len("<answer>2</answer>") + 1  # BOS + prompt; + EOS
    assert ids[0] == BOS and ids[n_prompt + n_completion - 1] == EOS
    assert (ids[n_prompt + n_completion:] == PAD).all()
    assert mask[:n_prompt].sum() == 0 and mask[n_prompt:n_prompt + n_completion].all()
    assert mask.sum() == n_completion and b["valid"][0].sum() == n_prompt + n_completion
    assert tok.decode(list(ids[n_prompt:])) == "<answer>2</answer>"
    np.testing.assert_array_equal(make_batch(tok, [ex], 8)["ids"][0][:5], ids[:5])  # truncation


@pytest.mark.slow
def test_scanned_chunks_train_exactly_like_one_jitted_call_per_step():
    """warm_start.train runs its steps in lax.scan chunks; the weights and losses must be the
    ones a plain loop of jitted steps gives, whatever the chunking (5 steps: 2+2+1)."""
    import optax
    from flax import nnx

    from rlexp.config.schema import ModelConfig
    from rlexp.data import batch_indices
    from rlexp.engine.tunix_models import build_model
    from rlexp.engine.warm_start import sequence_loss, train
    from test_models import SMALL

    m = ModelConfig(**SMALL)
    tok = CharTokenizer(m.vocab_size)
    examples = [Example(prompt=f"{a}+{b}=", answer=str(a + b), reference=f"<answer>{a + b}</answer>",
                        question=f"{a}+{b}") for a in range(6) for b in range(3)]
    args = dict(steps=5, lr=3e-3, batch_size=4, length=24, seed=0)

    def params(model):
        return {"/".join(map(str, k)): np.asarray(v)
                for k, v in nnx.to_flat_state(nnx.state(model, nnx.Param))}

    reference = build_model(m, None, 0)
    opt = nnx.Optimizer(reference, optax.chain(optax.clip_by_global_norm(1.0),
                                               optax.adamw(args["lr"], weight_decay=0.0)), wrt=nnx.Param)

    @nnx.jit
    def step(model, optimizer, ids, valid, loss_mask):
        loss, grads = nnx.value_and_grad(sequence_loss)(model, ids, valid, loss_mask)
        optimizer.update(model, grads)
        return loss

    want = []
    for k in range(args["steps"]):
        b = make_batch(tok, [examples[i] for i in batch_indices(len(examples), 4, 0, k)], 24)
        want.append(float(step(reference, opt, b["ids"], b["valid"], b["loss_mask"])))
    for chunk in (2,):  # two chunk shapes: 2 and the remainder 1
        model = build_model(m, None, 0)
        said = []
        got = train(model, tok, examples, chunk=chunk, progress=lambda *a: said.append(a),
                    **args)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        # progress after each chunk: steps done and that chunk's last loss
        assert [n for n, _ in said] == [2, 4, 5]
        np.testing.assert_allclose([x for _, x in said], [want[1], want[3], want[4]], rtol=1e-6)
        for name, value in params(reference).items():
            np.testing.assert_allclose(params(model)[name], value, rtol=1e-5, atol=1e-6,
                                       err_msg=name)
    assert want[-1] < want[0]


def test_weights_round_trip_through_flat_names_in_the_models_dtypes():
    """rlexp.weights: params -> flat dict -> assign restores every parameter (and casts to
    the model's dtype), with either separator."""
    import jax.numpy as jnp

    from rlexp.config.schema import ModelConfig
    from rlexp.engine.tunix_models import build_model
    from rlexp.engine.weights import assign, params
    from test_models import SMALL

    m = ModelConfig(**SMALL)
    a, b = build_model(m, None, 0), build_model(m, None, 1)
    for sep in ("/", "."):
        flat = {k: np.asarray(v, np.float64) for k, v in params(a, sep).items()}
        assert all(sep in k for k in flat)
        assign(b, flat, sep)
        for k, v in params(b, sep).items():
            assert v.dtype == jnp.float32
            np.testing.assert_array_equal(np.asarray(v), flat[k].astype(np.float32), err_msg=k)


def test_a_cached_warm_start_builds_the_model_abstract_and_assigns_every_weight(tmp_path):
    """A cache hit reads the weights first and builds the model abstract (no random draws);
    warm_start then gives it exactly the cached weights, as a concrete random-init model
    loading them would have them; a config without an entry reads nothing."""
    import jax
    import jax.numpy as jnp
    from flax import nnx

    from rlexp.engine.tunix_models import build_model
    from rlexp.engine.warm_start import cache_path, cached_params, save_params, warm_start
    from rlexp.engine.weights import params

    c = Config()
    c.run.cache_dir = str(tmp_path)
    c.model.warm_start_steps = 3
    assert cached_params(c) is None
    source = build_model(c.model, None, 1)
    save_params(source, cache_path(c))
    cached = cached_params(c)

    abstract = build_model(c.model, None, 0, abstract=True)
    leaves = jax.tree.leaves(nnx.state(abstract))
    assert leaves and all(isinstance(x, jax.ShapeDtypeStruct) for x in leaves)
    info = warm_start(c, abstract, None, [], cached)
    assert info == {"warm_start/steps": 3, "warm_start/cached": 1}
    assert all(isinstance(x, jax.Array) for x in jax.tree.leaves(nnx.state(abstract)))
    concrete = build_model(c.model, None, 0)
    warm_start(c, concrete, None, [], cached_params(c))
    want, got = params(source), params(abstract)
    assert set(got) == set(want) == set(params(concrete))
    for name, value in want.items():
        assert isinstance(got[name], jax.Array) and got[name].dtype == jnp.float32
        np.testing.assert_array_equal(np.asarray(got[name]), np.asarray(value), err_msg=name)
        np.testing.assert_array_equal(np.asarray(params(concrete)[name]), np.asarray(value))
