"""Model families (rlexp.families), fast: adding a family is one file (no family-name branch
anywhere else), each family's export mapping inverts Tunix's own loader table onto the
parameters Tunix's model holds, config.json is read in both of its layouts and refused where
Tunix's model differs, parameter counts match the published ones, and the Qwen2.5 and Gemma 3
model files plan. The logits against transformers are tests/test_family_models.py (slow)."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import numpy as np
import pytest

from helpers import cli
from rlexp.base.errors import UserError
from rlexp.config.schema import Config, ModelConfig
from rlexp.config.validate import knobs
from rlexp.families import families, get
from rlexp.inputs.model_files import check_hf_config

ROOT = Path(__file__).resolve().parents[1]
FAMILY_DIR = ROOT / "src" / "rlexp" / "families"

# ------------------------------------------------------------------ adding a family = one file


def _family_branches(tree: ast.AST) -> list[int]:
    """Lines comparing something called `family` (m.family, family, cfg.model.family) with
    ==, !=, in, not in, or indexing a table by it (TABLE[m.family])."""

    def is_family(node: ast.AST) -> bool:
        return (isinstance(node, ast.Attribute) and node.attr == "family") or \
            (isinstance(node, ast.Name) and node.id == "family")

    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare) and any(
                isinstance(op, (ast.Eq, ast.NotEq, ast.In, ast.NotIn)) for op in node.ops) \
                and any(is_family(n) for n in (node.left, *node.comparators)):
            lines.append(node.lineno)
        if isinstance(node, ast.Subscript) and is_family(node.slice):
            lines.append(node.lineno)
        if isinstance(node, ast.Match) and is_family(node.subject):
            lines.append(node.lineno)
    return lines


def test_the_branch_finder_finds_branches():
    code = ("if m.family == 'qwen3': pass\nx = 'llama3' != family\ny = family in ('a',)\n"
            "z = TABLE[cfg.model.family]\nw = get(m.family)\n")
    assert _family_branches(ast.parse(code)) == [1, 2, 3, 4]


def test_nothing_outside_the_family_modules_branches_on_a_family_name():
    offenders = {}
    for top in (ROOT / "src", ROOT / "launchers"):
        for path in top.rglob("*.py"):
            if FAMILY_DIR in path.parents:
                continue
            lines = _family_branches(ast.parse(path.read_text()))
            if lines:
                offenders[str(path.relative_to(ROOT))] = lines
    assert offenders == {}, "branch on model.family only inside rlexp/families/"


def test_every_family_module_is_a_choice_and_names_its_tunix_code():
    modules = sorted(p.stem for p in FAMILY_DIR.glob("*.py") if p.stem not in ("__init__", "family"))
    assert sorted(families()) == modules
    family = {key: spec for key, _, spec, _ in knobs(Config())}["model.family"]
    assert set(family.values(ModelConfig())) == set(modules)
    assert {"llama3", "qwen3", "qwen2", "gemma3", "gemma2", "cohere"} <= set(modules)
    with pytest.raises(KeyError):  # model.family's choices refuse it first, in one line
        get("mamba")

# --------------------------------------------------------- export = Tunix's loader, inverted


SMALL = dict(num_layers=2, embed_dim=32, num_heads=4, num_kv_heads=2, head_dim=8, hidden_dim=48,
             vocab_size=128, rope_theta=10_000.0, norm_eps=1e-6)


def _hf_names(m: ModelConfig) -> dict[str, tuple[int, ...]]:
    """The Hugging Face state dict of a model of family m.family: name -> shape."""
    fam = get(m.family)
    D, H, K, hd, F, V = (m.embed_dim, m.num_heads, m.num_kv_heads, m.head_dim, m.hidden_dim,
                         m.vocab_size)
    out = {"model.embed_tokens.weight": (V, D), "model.norm.weight": (D,)}
    if not m.tie_embeddings:
        out["lm_head.weight"] = (V, D)
    norms = ["input_layernorm", "post_attention_layernorm", "pre_feedforward_layernorm",
             "post_feedforward_layernorm"][:fam.norms_per_layer]
    for i in range(m.num_layers):
        p = f"model.layers.{i}."
        out.update({p + "self_attn.q_proj.weight": (H * hd, D),
                    p + "self_attn.k_proj.weight": (K * hd, D),
                    p + "self_attn.v_proj.weight": (K * hd, D),
                    p + "self_attn.o_proj.weight": (D, H * hd),
                    p + "mlp.gate_proj.weight": (F, D), p + "mlp.up_proj.weight": (F, D),
                    p + "mlp.down_proj.weight": (D, F)})
        out.update({p + f"{n}.weight": (D,) for n in norms})
        if fam.qk_norm:
            out.update({p + "self_attn.q_norm.weight": (hd,), p + "self_attn.k_norm.weight": (hd,)})
        if m.qk_norm:  # Cohere's per-head q/k LayerNorms
            out.update({p + "self_attn.q_norm.weight": (H, hd),
                        p + "self_attn.k_norm.weight": (K, hd)})
        if fam.qkv_bias:
            out.update({p + "self_attn.q_proj.bias": (H * hd,), p + "self_attn.k_proj.bias": (K * hd,),
                        p + "self_attn.v_proj.bias": (K * hd,)})
    return out


def tunix_params_from_hf(hf: dict[str, np.ndarray], m: ModelConfig) -> dict[str, np.ndarray]:
    """Tunix's own loader of the family (its key table, then its preprocess step where it has
    one: Gemma stacks q/k/v) applied to `hf`, without building a model: the map export must
    invert."""
    from rlexp.engine.tunix_models import tunix_config, tunix_loader

    loader = tunix_loader(get(m.family))
    config = tunix_config(m)
    table = loader._get_key_and_transform_mapping(config)
    out = {}
    for key, value in hf.items():
        for pattern, (target, transform) in table.items():
            if re.fullmatch(pattern, key):
                if transform is not None:
                    permute, reshape = transform
                    value = value.transpose(permute) if permute else value
                    value = value.reshape(reshape) if reshape else value
                out[re.sub(pattern, target, key)] = value
                break
        else:
            raise AssertionError(f"Tunix has no mapping for {key}")
    if hasattr(loader, "_make_preprocess_fn"):
        out = {k: np.asarray(v) for k, v in loader._make_preprocess_fn(config)(out).items()}
    return {k: v for k, v in out.items() if not k.startswith("unused.")}


def _model_shapes(m: ModelConfig) -> dict[str, tuple[int, ...]]:
    """Parameter name -> shape of Tunix's model of the family (abstract: nothing computed)."""
    from flax import nnx

    from rlexp.engine.tunix_models import tunix_config, tunix_module
    from rlexp.engine.weights import flatten

    fam = get(m.family)
    cls = getattr(tunix_module(fam), fam.model_class)
    abstract = nnx.eval_shape(lambda: cls(tunix_config(m), rngs=nnx.Rngs(0)))
    return {k: tuple(v.shape) for k, v in
            flatten(nnx.state(abstract, nnx.Param).to_pure_dict(), ".").items()}


CASES = [("llama3", False, 2), ("llama3", True, 2), ("qwen3", True, 2), ("qwen3", False, 2),
         ("qwen2", False, 2), ("qwen2", True, 2), ("gemma3", True, 2), ("gemma3", True, 1),
         ("gemma3", True, 4), ("gemma2", True, 2), ("gemma2", True, 4), ("cohere", True, 2),
         ("cohere", False, 2), ("cohere+qk_norm", True, 2)]
# (family, tied, kv heads): 4 = heads (Tunix's Gemma fuses q, k, v); +qk_norm: model.qk_norm


@pytest.mark.parametrize("family,tied,kv", CASES)
def test_export_inverts_tunix_loader_onto_the_model_parameters(family, tied, kv):
    family, _, extra = family.partition("+")
    m = ModelConfig(**{**SMALL, "num_kv_heads": kv}, family=family, tie_embeddings=tied,
                    sliding_window=4 if family.startswith("gemma") else None,
                    qk_norm=extra == "qk_norm")
    rng = np.random.default_rng(0)
    hf = {k: rng.normal(size=s).astype(np.float32) for k, s in _hf_names(m).items()}
    tunix = tunix_params_from_hf(hf, m)
    # Tunix's loader fills exactly the parameters Tunix's model holds, in their shapes
    assert {k: tuple(v.shape) for k, v in tunix.items()} == _model_shapes(m)
    back = get(family).to_hf_weights({k.replace(".", "/"): v for k, v in tunix.items()}, m)
    assert sorted(back) == sorted(hf)
    for key in hf:
        np.testing.assert_array_equal(back[key], hf[key], err_msg=key)


def test_an_unknown_parameter_has_no_hf_name():
    for family in families():
        with pytest.raises(ValueError, match="no Hugging Face name"):
            get(family).to_hf_weights({"layers/0/attn/rotary/w": np.ones(2)},
                                      ModelConfig(**SMALL, family=family))

# ----------------------------------------------------------------------------- config.json


def _write(tmp_path: Path, hf: dict) -> Path:
    (tmp_path / "config.json").write_text(json.dumps(hf))
    return tmp_path


def test_both_rope_layouts_are_read(tmp_path):
    m = ModelConfig(**SMALL, family="qwen2", tie_embeddings=False, path=str(tmp_path))
    own = get("qwen2").write_hf(m, "float32")  # the hub's layout: rope_theta
    check_hf_config(m, _write(tmp_path, own))
    new = {k: v for k, v in own.items() if k != "rope_theta"}
    new["rope_parameters"] = {"rope_type": "default", "rope_theta": 500_000.0}  # transformers 5
    with pytest.raises(UserError, match=r"model.rope_theta=10000.0 but .* rope_theta=500000.0"):
        check_hf_config(m, _write(tmp_path, new))
    g = ModelConfig(**SMALL, family="gemma3", sliding_window=4, rope_scale=8.0, path=str(tmp_path))
    layered = {**get("gemma3").write_hf(g, "float32"), "rope_theta": None, "rope_scaling": None,
               "rope_parameters": {
                   "sliding_attention": {"rope_type": "default", "rope_theta": 10_000.0},
                   "full_attention": {"rope_type": "linear", "factor": 8.0, "rope_theta": 10_000.0}}}
    check_hf_config(g, _write(tmp_path, layered))
    layered["rope_parameters"]["full_attention"]["factor"] = 4.0
    with pytest.raises(UserError, match=r"model.rope_scale=8.0 but .*rope_scaling.factor=4.0"):
        check_hf_config(g, _write(tmp_path, layered))


def test_what_tunix_cannot_run_is_refused_in_one_line(tmp_path):
    g = ModelConfig(**SMALL, family="gemma3", sliding_window=4, path=str(tmp_path))
    hf = get("gemma3").write_hf(g, "float32")
    for change, why in [({"query_pre_attn_scalar": 24}, "query_pre_attn_scalar=24 is not head_dim"),
                        ({"final_logit_softcapping": 30.0}, "logit soft-capping"),
                        ({"rope_local_base_freq": 5000.0}, "local RoPE base"),
                        ({"layer_types": ["full_attention"] * 2}, "layer_types differ")]:
        with pytest.raises(UserError, match=f"gemma3 model runs: .*{why}") as exc:
            check_hf_config(g, _write(tmp_path, {**hf, **change}))
        assert "\n" not in str(exc.value)
    q = ModelConfig(**SMALL, family="qwen2", path=str(tmp_path))
    with pytest.raises(UserError, match="use_sliding_window=true"):
        check_hf_config(q, _write(tmp_path, {**get("qwen2").write_hf(q, "float32"),
                                             "use_sliding_window": True}))


def test_a_checkpoint_of_another_family_names_the_right_one(tmp_path):
    m = ModelConfig(**SMALL, family="qwen3", path=str(tmp_path))
    hf = {"model_type": "gemma3_text"}
    with pytest.raises(UserError, match="model.family=qwen3 but .* model_type=gemma3_text; valid "
                                        "choices are gemma3"):
        check_hf_config(m, _write(tmp_path, hf))


def test_a_multimodal_gemma3_exports_its_language_model_config():
    m = ModelConfig(**SMALL, family="gemma3", sliding_window=4)
    base = {"architectures": ["Gemma3ForConditionalGeneration"], "model_type": "gemma3",
            "eos_token_id": [1, 106], "vision_config": {"hidden_size": 1152},
            "text_config": {"model_type": "gemma3_text", "hidden_size": 32,
                            "rope_scaling": {"rope_type": "linear", "factor": 8.0}}}
    out = get("gemma3").hf_config(m, "bfloat16", base)
    assert out["architectures"] == ["Gemma3ForCausalLM"] and out["model_type"] == "gemma3_text"
    assert "vision_config" not in out and out["rope_scaling"]["factor"] == 8.0
    assert (out["eos_token_id"], out["num_hidden_layers"], out["torch_dtype"]) == ([1, 106], 2,
                                                                                    "bfloat16")

# -------------------------------------------------------------------- model files and plans


# Parameter counts published with the checkpoints (Qwen2.5 model cards; Gemma 3 1B's and
# Gemma 2 2B's safetensors; Llama 3.1 8B and Qwen3-0.6B as tests/test_plan.py has them).
PUBLISHED = {"qwen2.5-0.5b": 494_032_768, "qwen2.5-1.5b": 1_543_714_304,
             "qwen2.5-7b": 7_615_616_512, "gemma3-1b": 999_885_952,
             "gemma2-2b": 2_614_341_888, "llama3.1-8b": 8_030_261_248,
             "qwen3-0.6b": 596_049_920}


@pytest.mark.parametrize("name", PUBLISHED)
def test_parameter_counts_match_the_published_ones(name, compose_config):
    from rlexp.planning.memory import param_count

    assert param_count(compose_config(f"model={name}").model) == PUBLISHED[name]


@pytest.mark.parametrize("name", ["qwen2.5-0.5b", "qwen2.5-1.5b", "qwen2.5-7b", "gemma3-1b",
                                  "gemma3-4b", "gemma2-2b"])
def test_new_model_files_plan_a_fit_on_v6e_8(name, compose_config):
    from rlexp.planning.plan import make_plan

    plan = make_plan(compose_config(f"model={name}", "hardware=v6e-8", "model.path=org/x"))
    assert plan.fits, plan.why
    assert f"({get(compose_config(f'model={name}').model.family).name}," in plan.lines[0]
    with pytest.raises(UserError, match=f"model={name} needs model.path"):
        from rlexp.inputs.model_files import check_model

        check_model(compose_config(f"model={name}").model, "outputs/cache")


def test_qwen2_5_dry_run_exits_0(tmp_path):
    proc = cli("model=qwen2.5-0.5b", "model.path=Qwen/Qwen2.5-0.5B-Instruct", "hardware=v6e-8",
               "run.dry_run=true", "tracker=none", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "qwen2.5-0.5b (qwen2, 494.03M parameters" in proc.stdout
