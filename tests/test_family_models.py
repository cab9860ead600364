"""Every model family against `transformers` (slow): a tiny random Hugging Face model of each
family, built by transformers from the config.json the family writes, saved as safetensors;
rlexp loads it through the family's Tunix loader with transformers' logits (float32, 1e-4),
and rlexp's export of it (with the source's config.json, and with the family's own) reloads in
transformers with the same logits. torch runs in two child processes for all families
(tests/hf_forward.py); the families share one module fixture."""

from __future__ import annotations

import json
import os
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

from hf_forward import hf_build, hf_logits_many, require_torch
from rlexp.config.schema import ModelConfig
from rlexp.families import get
from rlexp.inputs.tokenizer import BOS

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")

pytestmark = pytest.mark.slow

_BASE = dict(num_layers=2, embed_dim=32, num_heads=4, num_kv_heads=2, head_dim=8, hidden_dim=48,
             vocab_size=128, norm_eps=1e-6, max_position=64)
# One tiny model per family, each with what sets the family apart switched on: a RoPE base
# other than Tunix's default (llama3's patch), untied heads, q/k/v biases (qwen2), Gemma 3's
# sliding window shorter than the sequence over 6 layers (5 local + 1 global), one kv head (the
# 1B's shape) and grouped heads with linearly scaled global RoPE (the 4B's); Gemma 2's
# alternating windows with its logit soft-capping; Cohere's parallel block, LayerNorm, paired
# RoPE and logit scale (aya-expanse-8b's shape), then with per-head q/k norms, untied.
CASES = {
    "llama3": dict(_BASE, family="llama3", rope_theta=10_000.0, tie_embeddings=False),
    "qwen3": dict(_BASE, family="qwen3", rope_theta=1_000_000.0, tie_embeddings=True),
    "qwen2": dict(_BASE, family="qwen2", rope_theta=10_000.0, tie_embeddings=False),
    "gemma3": dict(_BASE, family="gemma3", num_layers=6, num_kv_heads=1, rope_theta=1_000_000.0,
                   sliding_window=4, tie_embeddings=True),
    "gemma3-gqa": dict(_BASE, family="gemma3", num_layers=6, rope_theta=1_000_000.0,
                       rope_scale=8.0, sliding_window=3, tie_embeddings=True),
    "gemma2": dict(_BASE, family="gemma2", num_layers=4, rope_theta=10_000.0, sliding_window=4,
                   tie_embeddings=True),
    "cohere": dict(_BASE, family="cohere", rope_theta=10_000.0, norm_eps=1e-5, logit_scale=0.125,
                   tie_embeddings=True),
    "cohere-qk-norm": dict(_BASE, family="cohere", rope_theta=500_000.0, logit_scale=0.5,
                           qk_norm=True, tie_embeddings=False),
}
TOKENS = np.array([BOS, 40, 41, 17, 20, 90, 33, 5, 60, 61], dtype=np.int32)
TOL = dict(rtol=1e-4, atol=1e-4)


def _rlexp_logits(model) -> np.ndarray:
    import jax.numpy as jnp

    T = len(TOKENS)
    logits, _ = model(jnp.asarray(TOKENS[None]), jnp.arange(T)[None], None,
                      jnp.tril(jnp.ones((T, T), bool))[None])
    return np.asarray(logits[0], dtype=np.float32)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """{case: {"model": ModelConfig, "hf": transformers' logits of the source, "rlexp": rlexp's
    logits of it, "remat": the same under train.remat=full, "exports": transformers' logits of [export with source config.json, export
    with the family's config.json], "hf_params": transformers' parameter count}}."""
    from rlexp.engine import export
    from rlexp.engine.tunix_models import build_model
    from rlexp.engine.tunix_patches import use_training_remat
    from rlexp.engine.weights import params

    require_torch()
    root = tmp_path_factory.mktemp("families")
    models, sources = {}, {}
    for case, fields in CASES.items():
        source = root / case / "hf"
        source.mkdir(parents=True)
        m = ModelConfig(name=f"tiny-{case}", path=str(source), **fields)
        (source / "config.json").write_text(json.dumps(get(m.family).write_hf(m, "float32")))
        models[case], sources[case] = m, source
    built = hf_build(list(sources.values()), TOKENS)
    exports = []
    for case, m in models.items():
        flat = params(build_model(m, mesh=None, seed=0))
        exports += [export.write(root / case / "export", flat, m, source=sources[case]),
                    export.write(root / case / "export-own", flat, m, source=None)]
    # transformers reloads the exports in its child process while rlexp's logits run here, each
    # model built anew (a build sets process-wide patches, e.g. the family's RoPE base)
    with ThreadPoolExecutor(1) as pool:
        reloaded = pool.submit(hf_logits_many, exports, TOKENS)
        out: dict[str, dict] = {}
        for case, m in models.items():
            model = build_model(m, mesh=None, seed=0)
            use_training_remat(m.family, "full")  # the wrapper finds each family's cache argument
            try:
                remat = _rlexp_logits(model)
            finally:
                use_training_remat(m.family, "none")
            out[case] = {"model": m, "hf": np.load(sources[case] / "hf_logits.npy"),
                         "rlexp": _rlexp_logits(model), "remat": remat,
                         "hf_params": built[str(sources[case])]["params"]}
        logits = reloaded.result()
    for i, case in enumerate(models):
        out[case]["exports"] = logits[2 * i: 2 * i + 2]
    return out


@pytest.mark.parametrize("case", CASES)
def test_rlexp_loads_the_hf_model_with_transformers_logits(runs, case):
    r = runs[case]
    assert r["hf"].shape == (len(TOKENS), r["model"].vocab_size)
    np.testing.assert_allclose(r["rlexp"], r["hf"], **TOL)


@pytest.mark.parametrize("case", CASES)
def test_rlexp_export_reloads_in_transformers_with_equal_logits(runs, case):
    with_source, own_config = runs[case]["exports"]
    np.testing.assert_allclose(with_source, runs[case]["hf"], **TOL)
    np.testing.assert_allclose(own_config, runs[case]["hf"], **TOL)


@pytest.mark.parametrize("case", CASES)
def test_the_memory_plan_counts_transformers_parameters(runs, case):
    from rlexp.planning.memory import param_count

    assert param_count(runs[case]["model"]) == runs[case]["hf_params"]


@pytest.mark.parametrize("case", CASES)
def test_training_remat_keeps_the_forward(runs, case):
    np.testing.assert_allclose(runs[case]["remat"], runs[case]["rlexp"], rtol=1e-6, atol=1e-6)


def test_cohere_decoding_with_the_kv_cache_gives_the_full_forwards_logits():
    """The sampler's path (no transformers needed): prefill then one token at a time through
    init_cache's cache gives the logits of one full forward pass."""
    import jax.numpy as jnp
    from flax import nnx

    from rlexp.engine.tunix_models import tunix_config, tunix_module

    m = ModelConfig(name="tiny-cohere", **CASES["cohere-qk-norm"])
    module = tunix_module(get("cohere"))
    model = module.Cohere(tunix_config(m), rngs=nnx.Rngs(0))
    full = _rlexp_logits(model)
    T, S, prefill = len(TOKENS), 16, 6
    cache = model.init_cache(1, S, jnp.float32)
    causal = jnp.tril(jnp.ones((T, S), bool))
    logits, cache = model(jnp.asarray(TOKENS[None, :prefill]), jnp.arange(prefill)[None], cache,
                          causal[None, :prefill])
    steps = [np.asarray(logits[0])]
    for t in range(prefill, T):
        logits, cache = model(jnp.asarray(TOKENS[None, t:t + 1]), jnp.array([[t]]), cache,
                              causal[None, t:t + 1])
        steps.append(np.asarray(logits[0]))
    np.testing.assert_allclose(np.concatenate(steps), full, rtol=1e-5, atol=1e-5)
