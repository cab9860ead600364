"""Model construction: user errors (fast) and an HF-layout Qwen3 checkpoint written by the
test, loaded through Tunix's safetensors loader, against a NumPy forward pass (slow)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from rlexp.inputs import model_files as models
from rlexp.config.schema import ModelConfig
from rlexp.base.errors import UserError
from rlexp.inputs.tokenizer import BOS, EOS, PAD, CharTokenizer

SMALL = dict(family="qwen3", num_layers=2, embed_dim=32, num_heads=4, num_kv_heads=2, head_dim=8,
             hidden_dim=48, vocab_size=128, rope_theta=1_000_000.0, norm_eps=1e-6,
             tie_embeddings=True, tokenizer="char")


def hf_config(m: ModelConfig) -> dict:
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "num_hidden_layers": m.num_layers,
            "hidden_size": m.embed_dim, "num_attention_heads": m.num_heads,
            "num_key_value_heads": m.num_kv_heads, "head_dim": m.head_dim,
            "intermediate_size": m.hidden_dim, "vocab_size": m.vocab_size,
            "rope_theta": m.rope_theta, "rms_norm_eps": m.norm_eps, "tie_word_embeddings": True}


def random_hf_weights(m: ModelConfig, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    D, H, K, hd, F, V = m.embed_dim, m.num_heads, m.num_kv_heads, m.head_dim, m.hidden_dim, m.vocab_size
    w = {"model.embed_tokens.weight": rng.normal(0, 0.5, (V, D)),
         "model.norm.weight": rng.uniform(0.5, 1.5, D)}
    for i in range(m.num_layers):
        p = f"model.layers.{i}."
        w.update({
            p + "self_attn.q_proj.weight": rng.normal(0, 0.2, (H * hd, D)),
            p + "self_attn.k_proj.weight": rng.normal(0, 0.2, (K * hd, D)),
            p + "self_attn.v_proj.weight": rng.normal(0, 0.2, (K * hd, D)),
            p + "self_attn.o_proj.weight": rng.normal(0, 0.2, (D, H * hd)),
            p + "self_attn.q_norm.weight": rng.uniform(0.5, 1.5, hd),
            p + "self_attn.k_norm.weight": rng.uniform(0.5, 1.5, hd),
            p + "input_layernorm.weight": rng.uniform(0.5, 1.5, D),
            p + "post_attention_layernorm.weight": rng.uniform(0.5, 1.5, D),
            p + "mlp.gate_proj.weight": rng.normal(0, 0.2, (F, D)),
            p + "mlp.up_proj.weight": rng.normal(0, 0.2, (F, D)),
            p + "mlp.down_proj.weight": rng.normal(0, 0.2, (D, F)),
        })
    return {k: v.astype(np.float32) for k, v in w.items()}


def write_checkpoint(path, m: ModelConfig, weights) -> None:
    from safetensors.numpy import save_file

    path.mkdir(parents=True, exist_ok=True)
    (path / "config.json").write_text(json.dumps(hf_config(m)))
    save_file(weights, str(path / "model.safetensors"))


def numpy_qwen3(w: dict, m: ModelConfig, tokens: np.ndarray) -> np.ndarray:
    """Hugging Face Qwen3 semantics, written out in NumPy: logits [T, V] for one sequence."""
    def rms(x, g):
        return x / np.sqrt((x * x).mean(-1, keepdims=True) + m.norm_eps) * g

    def rope(x, pos):  # x [T, heads, hd]; HF rotate_half convention
        half = m.head_dim // 2
        inv = 1.0 / m.rope_theta ** (np.arange(0, m.head_dim, 2) / m.head_dim)
        ang = pos[:, None] * inv[None]
        cos, sin = np.cos(ang)[:, None], np.sin(ang)[:, None]
        x1, x2 = x[..., :half], x[..., half:]
        return np.concatenate([x1 * cos - x2 * sin, x2 * cos + x1 * sin], -1)

    T = len(tokens)
    pos = np.arange(T, dtype=np.float64)
    x = w["model.embed_tokens.weight"][tokens].astype(np.float64)
    group = m.num_heads // m.num_kv_heads
    causal = np.tril(np.ones((T, T), bool))
    for i in range(m.num_layers):
        p = f"model.layers.{i}."
        h = rms(x, w[p + "input_layernorm.weight"])
        q = (h @ w[p + "self_attn.q_proj.weight"].T).reshape(T, m.num_heads, m.head_dim)
        k = (h @ w[p + "self_attn.k_proj.weight"].T).reshape(T, m.num_kv_heads, m.head_dim)
        v = (h @ w[p + "self_attn.v_proj.weight"].T).reshape(T, m.num_kv_heads, m.head_dim)
        q = rope(rms(q, w[p + "self_attn.q_norm.weight"]), pos)
        k = rope(rms(k, w[p + "self_attn.k_norm.weight"]), pos)
        out = np.zeros((T, m.num_heads, m.head_dim))
        for head in range(m.num_heads):
            kv = head // group
            s = q[:, head] @ k[:, kv].T / np.sqrt(m.head_dim)
            s = np.where(causal, s, -np.inf)
            a = np.exp(s - s.max(-1, keepdims=True))
            out[:, head] = (a / a.sum(-1, keepdims=True)) @ v[:, kv]
        x = x + out.reshape(T, -1) @ w[p + "self_attn.o_proj.weight"].T
        h = rms(x, w[p + "post_attention_layernorm.weight"])
        gate = h @ w[p + "mlp.gate_proj.weight"].T
        x = x + ((gate / (1 + np.exp(-gate))) * (h @ w[p + "mlp.up_proj.weight"].T)) @ w[p + "mlp.down_proj.weight"].T
    return rms(x, w["model.norm.weight"]) @ w["model.embed_tokens.weight"].T


# ------------------------------------------------------------------------------ fast


def test_char_tokenizer_round_trip_and_specials():
    tok = CharTokenizer(128)
    text = "Calculate 5 - 3.\n<answer>2</answer>"
    assert tok.decode(tok.encode(text)) == text
    assert tok.decode(tok.encode("ab") + [EOS] + tok.encode("cd")) == "ab"
    assert (tok.pad_id(), tok.bos_id(), tok.eos_id()) == (PAD, BOS, EOS)
    with pytest.raises(UserError, match="model.vocab_size"):
        models.build_tokenizer(ModelConfig(vocab_size=50))


def test_model_path_errors(tmp_path):
    with pytest.raises(UserError, match="directory not found"):
        models.model_dir(ModelConfig(path=str(tmp_path / "nope")))
    with pytest.raises(UserError, match="no config.json"):
        models.model_dir(ModelConfig(path=str(tmp_path)))
    (tmp_path / "config.json").write_text("{}")
    with pytest.raises(UserError, match="no \\*.safetensors"):
        models.model_dir(ModelConfig(path=str(tmp_path)))
    with pytest.raises(UserError, match="no tokenizer.json"):
        models.build_tokenizer(ModelConfig(path=str(tmp_path), tokenizer="hf"))


def test_config_json_must_match_yaml(tmp_path):
    m = ModelConfig(**SMALL, path=str(tmp_path))
    (tmp_path / "config.json").write_text(json.dumps({**hf_config(m), "num_hidden_layers": 3}))
    with pytest.raises(UserError, match="model.num_layers=2 but .* num_hidden_layers=3"):
        models.check_hf_config(m, tmp_path)


# ------------------------------------------------------------------------------ slow


@pytest.mark.slow
@pytest.mark.parametrize("rope_theta", [1_000_000.0, 10_000.0])  # Tunix's own base, and not
def test_hf_checkpoint_loads_and_matches_numpy_forward(tmp_path, rope_theta):
    import jax.numpy as jnp

    from rlexp.engine import tunix_models as engine_models

    m = ModelConfig(**{**SMALL, "rope_theta": rope_theta}, path=str(tmp_path / "ckpt"))
    weights = random_hf_weights(m)
    write_checkpoint(tmp_path / "ckpt", m, weights)
    model = engine_models.build_model(m, mesh=None, seed=0)
    tokens = np.array([BOS, 40, 41, 17, 20, 90, 33, 5, 60, 61], dtype=np.int32)
    T = len(tokens)
    logits, _ = model(jnp.asarray(tokens[None]), jnp.arange(T)[None], None,
                      jnp.tril(jnp.ones((T, T), bool))[None])
    want = numpy_qwen3(weights, m, tokens)
    np.testing.assert_allclose(np.asarray(logits[0]), want, rtol=2e-4, atol=2e-4)
    # and a wrong family is refused in one line rather than crashing in the loader
    with pytest.raises(UserError, match="model.family=llama3 but .*model_type=qwen3"):
        engine_models.build_model(ModelConfig(**{**SMALL, "family": "llama3"},
                                              path=str(tmp_path / "ckpt")), mesh=None, seed=0)
