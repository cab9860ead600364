"""LoRA (model.lora). Fast: the adapter count by hand, the memory plan's LoRA terms, the
refusals, and the merge / PEFT layout against a NumPy LoRA forward. Slow (one shared engine):
a LoRA run trains the adapters alone (base arrays untouched and shared with the reference,
optimizer state = the adapters' moments, as the plan counts), resumes from its adapter-only
checkpoint to the same update, and exports a merged model whose transformers logits equal the
LoRA policy's."""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from rlexp.base.errors import UserError
from rlexp.config.schema import Config, ModelConfig
from rlexp.config.validate import validate
from rlexp.engine import export, lora
from rlexp.inputs.tokenizer import BOS
from rlexp.planning.memory import DTYPE_BYTES, lora_param_count, memory_plan, param_count
from rlexp.planning.plan import checkpoint_bytes, make_plan
from hf_forward import hf_logits, require_torch
from test_models import SMALL, numpy_qwen3

ALL = ".*q_proj|.*k_proj|.*v_proj|.*o_proj|.*gate_proj|.*up_proj|.*down_proj"


def test_adapter_count_by_hand():
    # D=32, q=H*hd=32, kv=K*hd=16, F=48, rank 4, 2 layers:
    # q 4*(32+32) + k 4*(32+16) + v 4*(32+16) + o 4*(32+32) = 256+192+192+256 = 896;
    # gate, up 4*(32+48) = 320 each, down 4*(48+32) = 320  -> 896 + 960 = 1856 per layer
    m = ModelConfig(**SMALL)
    m.lora.rank = 4
    assert lora_param_count(m) == 2 * 1856
    m.lora.targets = ".*q_proj|.*v_proj"
    assert lora_param_count(m) == 2 * (256 + 192)
    m.lora.rank = 0
    assert lora_param_count(m) == 0


def test_memory_plan_holds_adapters_only_in_the_optimizer():
    cfg = validate(Config())
    full = memory_plan(cfg)
    cfg.model.lora.rank = 8
    plan = memory_plan(cfg)
    n, nl = param_count(cfg.model), lora_param_count(cfg.model)
    pb = DTYPE_BYTES[cfg.model.param_dtype]
    assert nl == 2 * 8 * (2 * (64 + 64) + 2 * (64 + 32) + 3 * (64 + 128)) == 16384  # tiny
    assert plan.trainer["optimizer"] == nl * 2 * pb  # AdamW's two moments of the adapters
    assert plan.trainer["new weights"] == (n + nl) * pb  # the step returns every weight anew
    assert plan.trainer["gradients"] == nl * pb  # optax.MultiSteps accumulator
    assert plan.trainer["policy"] == (n + nl) * pb
    assert plan.trainer["reference"] == 0.0 < full.trainer["reference"]  # the base, shared
    assert plan.trainer["activations"] > full.trainer["activations"]  # + x @ A per adapter
    assert checkpoint_bytes(cfg) < checkpoint_bytes(validate(Config()))
    line = next(ln for ln in make_plan(cfg).lines if ln.startswith("lora"))
    assert "LoRA optimizer state (adapters only) 128 KiB" in line and "16,384 trainable" in line


@pytest.mark.parametrize("key,value,needle", [
    ("rank", -1, "model.lora.rank=-1 is invalid: must be in [0, 4096]"),
    ("alpha", 0.0, "model.lora.alpha=0.0 is invalid"),
    ("targets", "(", "model.lora.targets='(' is invalid: is not a regex"),
    ("targets", ".*embedder", "model.lora.targets='.*embedder' is invalid: matches no projection"),
])
def test_bad_lora_settings_are_refused_in_one_line(key, value, needle):
    cfg = Config()
    cfg.model.lora.rank = 8
    setattr(cfg.model.lora, key, value)
    with pytest.raises(UserError) as err:
        validate(cfg)
    assert needle in str(err.value) and "\n" not in str(err.value)


def test_lora_with_vllm_is_refused():
    cfg = Config()
    cfg.model.lora.rank, cfg.rollout.name = 8, "vllm"
    with pytest.raises(UserError, match=r"rollout.name='vllm' is invalid: LoRA .* rollout=vanilla"):
        validate(cfg)


def _tunix_weights(m: ModelConfig, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """Random Tunix-layout qwen3 weights (dotted names, as export.to_hf reads them)."""
    D, H, K, hd, F, V = m.embed_dim, m.num_heads, m.num_kv_heads, m.head_dim, m.hidden_dim, m.vocab_size
    w = {"embedder.input_embedding": rng.normal(0, 0.5, (V, D)),
         "final_norm.w": rng.uniform(0.5, 1.5, D)}
    for i in range(m.num_layers):
        p = f"layers.{i}."
        w.update({p + "attn.q_proj.w": rng.normal(0, 0.2, (D, H, hd)),
                  p + "attn.k_proj.w": rng.normal(0, 0.2, (D, K, hd)),
                  p + "attn.v_proj.w": rng.normal(0, 0.2, (D, K, hd)),
                  p + "attn.o_proj.w": rng.normal(0, 0.2, (H, hd, D)),
                  p + "attn.q_norm.w": rng.uniform(0.5, 1.5, hd),
                  p + "attn.k_norm.w": rng.uniform(0.5, 1.5, hd),
                  p + "input_layernorm.w": rng.uniform(0.5, 1.5, D),
                  p + "post_attention_layernorm.w": rng.uniform(0.5, 1.5, D),
                  p + "mlp.gate_proj.kernel": rng.normal(0, 0.2, (D, F)),
                  p + "mlp.up_proj.kernel": rng.normal(0, 0.2, (D, F)),
                  p + "mlp.down_proj.kernel": rng.normal(0, 0.2, (F, D))})
    return w


def _qwix_adapters(w: dict[str, np.ndarray], rank: int, rng: np.random.Generator) -> dict:
    """Adapters in qwix's shapes: A = the weight's contracting dims + rank, B = rank + the rest
    (q/k/v contract embed; o contracts heads, head_dim; MLP kernels contract their input)."""
    out = {}
    for key, v in w.items():
        if key.endswith(("proj.w", "proj.kernel")):
            split = 2 if ".o_proj." in key else 1
            out[key + "_lora_a"] = rng.normal(0, 0.3, (*v.shape[:split], rank))
            out[key + "_lora_b"] = rng.normal(0, 0.3, (rank, *v.shape[split:]))
    return out


def test_merge_and_peft_adapters_give_the_lora_forward(tmp_path):
    """Merged export = base + B @ A * alpha / r through PEFT's own layout, checked by the
    NumPy forward (HF semantics) of both; one hand-computed delta."""
    m = ModelConfig(**SMALL)
    m.lora.rank, m.lora.alpha = 4, 8.0
    rng = np.random.default_rng(0)
    base = _tunix_weights(m, rng)
    adapters = _qwix_adapters(base, 4, rng)
    flat = {**base, **adapters}
    a, b = adapters["layers.1.mlp.down_proj.kernel_lora_a"], adapters["layers.1.mlp.down_proj.kernel_lora_b"]
    merged = lora.merge(flat, m.lora.alpha, m.lora.rank)
    assert set(merged) == set(base)
    np.testing.assert_allclose(merged["layers.1.mlp.down_proj.kernel"],
                               base["layers.1.mlp.down_proj.kernel"] + a @ b * 2.0, rtol=1e-12)

    out = export.write(tmp_path / "merged", flat, m, None)  # what a LoRA run's export writes
    from safetensors.numpy import load_file

    hf_merged = load_file(str(out / "model.safetensors"))
    m.lora.adapters_only = True
    peft_dir = export.write(tmp_path / "adapters", flat, m, None)
    peft = load_file(str(peft_dir / lora.PEFT_WEIGHTS))
    config = json.loads((peft_dir / lora.PEFT_CONFIG).read_text())
    assert (config["r"], config["lora_alpha"], config["peft_type"]) == (4, 8.0, "LORA")
    assert sorted(config["target_modules"]) == sorted(
        ["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"])
    assert len(peft) == len(adapters) == 2 * 7 * m.num_layers
    # PEFT's forward: y = x W^T + (x A^T) B^T * alpha / r, i.e. W + B @ A * alpha / r
    hf_lora = export.to_hf(base, m)
    for key, w_hf in hf_lora.items():
        name = "base_model.model." + key[: -len(".weight")]
        if f"{name}.lora_A.weight" in peft:
            A, B = peft[f"{name}.lora_A.weight"], peft[f"{name}.lora_B.weight"]
            assert A.shape == (4, w_hf.shape[1]) and B.shape == (w_hf.shape[0], 4)
            hf_lora[key] = w_hf + B @ A * (8.0 / 4)
    tokens = np.array([BOS, 40, 41, 17, 20, 90, 33, 5], dtype=np.int32)
    np.testing.assert_allclose(numpy_qwen3(hf_merged, m, tokens), numpy_qwen3(hf_lora, m, tokens),
                               rtol=1e-10, atol=1e-10)
    assert not np.allclose(numpy_qwen3(export.to_hf(base, m), m, tokens),
                           numpy_qwen3(hf_lora, m, tokens), atol=1e-3)  # the adapters matter


def test_gemma_einsum_adapters_merge_in_the_weights_layout():
    """Gemma's q_einsum [heads, embed, hd]: qwix's A is [embed, r], B [r, heads, hd]
    (providers/lora.py: contracting dims to A); kv_einsum [2, kv, embed, hd] likewise."""
    rng = np.random.default_rng(1)
    a, b = rng.normal(size=(6, 2)), rng.normal(size=(2, 3, 5))
    q = rng.normal(size=(3, 6, 5))
    merged = lora.merge({"layers.0.attn.q_einsum.w": q, "layers.0.attn.q_einsum.w_lora_a": a,
                         "layers.0.attn.q_einsum.w_lora_b": b}, alpha=4.0, rank=2)
    want = q + np.einsum("dr,rnh->ndh", a, b) * 2.0
    np.testing.assert_allclose(merged["layers.0.attn.q_einsum.w"], want, rtol=1e-12)
    bkv = rng.normal(size=(2, 2, 1, 5))
    assert lora.layout((6,), (2, 1, 5), (2, 1, 6, 5)) == (1, 2, 0, 3)
    d = lora.delta(a, bkv, 2.0, 2, (2, 1, 6, 5))
    np.testing.assert_allclose(d, np.einsum("dr,rckh->ckdh", a, bkv), rtol=1e-12)
    with pytest.raises(ValueError, match="2 ways"):  # equal sizes: ambiguous, refused
        lora.layout((4,), (3, 4), (3, 4, 4))


def test_gemma3_lora_recipe_plans_the_adapters(compose_config):
    cfg = compose_config("experiment=tunix_gemma3-1b_lora_grpo")
    m = cfg.model
    # Gemma3-1B: 26 layers, embed 1152, 4 heads x 256, 1 kv head, MLP 6912; rank 64:
    # q_einsum 1152+1024, kv_einsum 1152+512, attn_vec 1024+1152, 3 MLP x (1152+6912)
    per_layer = (1152 + 1024) + (1152 + 512) + (1024 + 1152) + 3 * (1152 + 6912)
    assert (m.num_layers, m.embed_dim, m.num_heads, m.num_kv_heads) == (26, 1152, 4, 1)
    assert lora_param_count(m) == 26 * 64 * per_layer
    plan = make_plan(cfg)
    line = next(ln for ln in plan.lines if ln.startswith("lora"))
    assert "LoRA optimizer state (adapters only)" in line and "q_einsum,kv_einsum" in line
    assert plan.fits, plan.why


# ------------------------------------------------------------------------------ slow

STEPS = 3


def _base_arrays(model):
    """The base weights' arrays (every nnx.Param that is not an adapter), in tree order."""
    import jax
    from flax import nnx

    return jax.tree_util.tree_leaves(nnx.state(model, nnx.All(nnx.Param, nnx.Not(nnx.LoRAParam))))


@pytest.fixture(scope="module")
def lora_run(tmp_path_factory):
    """A LoRA engine (rank 4, beta > 0): steps 1-2, a checkpoint, step 3. The session's run
    cache: the warm start (which trains the base, LoRA or not) is test_accumulation's."""
    from rlexp import engine as engine_lib
    from rlexp.engine import rollout_key
    from test_engine import tiny_config

    cache = os.environ.get("RLEXP_CACHE_DIR") or tmp_path_factory.mktemp("cache")
    cfg = tiny_config("grpo", cache)
    cfg.algo.num_iterations = 1
    cfg.rollout.logprob_gap_every = 1  # every step the same sampler program (one compile)
    cfg.model.lora.rank, cfg.model.lora.alpha = 4, 8.0
    cfg.train.learning_rate = 1e-2
    cfg = validate(cfg)
    run_dir = tmp_path_factory.mktemp("lora")
    eng = engine_lib.build(cfg, make_plan(cfg), run_dir)
    before = eng.policy_state()
    base_arrays = _base_arrays(eng.cluster.actor_trainer.model)
    store = eng.checkpoint_store(str(run_dir / "checkpoints"), keep=2)

    def step(engine, k):
        batch = engine.splits.train_batch(k, cfg.train.batch_size, cfg.train.seed)
        return engine.train_step(batch, rollout_key(cfg.train.seed, k + 1))

    metrics = [step(eng, k) for k in range(2)]
    store.save(2, {"step": 2})
    metrics.append(step(eng, 2))
    store.close()
    return dict(cfg=cfg, engine=eng, before=before, after=eng.policy_state(), metrics=metrics,
                base_arrays=base_arrays, run_dir=run_dir, step=step, build=engine_lib.build)


@pytest.mark.slow
def test_lora_run_trains_the_adapters_alone(lora_run):
    from flax import nnx
    from tunix.rl import utils as rl_utils

    r = lora_run
    eng, m = r["engine"], r["cfg"].model
    assert all(np.isfinite(x["train/loss"]) for x in r["metrics"])
    names = lora.adapter_names(r["after"])
    assert names and all(k.endswith(("_lora_a", "_lora_b")) for k in names)
    # B starts at zero (qwix) and moved; every base weight is bit-identical, the same arrays
    assert all(not np.any(r["before"][k]) for k in names if k.endswith("_lora_b"))
    assert all(np.any(r["after"][k]) for k in names if k.endswith("_lora_b"))
    assert all(np.array_equal(r["before"][k], r["after"][k]) for k in r["before"] if k not in names)
    actor = eng.cluster.actor_trainer.model
    assert all(x is y for x, y in zip(r["base_arrays"], _base_arrays(actor)))
    # the reference is the base itself: Tunix's backbone-sharing test holds
    reference = eng.cluster._inference_worker._models["reference"]
    assert rl_utils.is_sharing_backbone(reference, actor)
    # counts (MLflow params) and the optimizer: AdamW's mu and nu of the adapters, nothing else
    nl = lora_param_count(m)
    assert eng.info["params/trainable"] == nl
    assert eng.info["params/total"] == param_count(m) + nl
    opt = nnx.state(eng.cluster.actor_trainer.optimizer, nnx.optimizer.OptState)
    arrays = {jax_path(p): x for p, x in jax_leaves_with_path(opt) if x.ndim > 0}
    assert arrays and all(("_lora_a" in p or "_lora_b" in p) for p in arrays)
    moments = [x for p, x in arrays.items() if "'mu'" in p or "'nu'" in p]
    accumulated = [x for p, x in arrays.items() if "acc_grads" in p]  # optax.MultiSteps
    assert len(moments) + len(accumulated) == len(arrays)
    assert sum(x.size for x in moments) == 2 * nl and sum(x.size for x in accumulated) == nl
    plan = make_plan(r["cfg"]).memory  # the plan counts exactly these
    assert sum(x.nbytes for x in moments) == plan["optimizer"]
    assert sum(x.nbytes for x in accumulated) == plan["gradients"]


def jax_leaves_with_path(tree):
    import jax

    return jax.tree_util.tree_leaves_with_path(tree)


def jax_path(path) -> str:
    import jax

    return jax.tree_util.keystr(path)


@pytest.mark.slow
def test_lora_checkpoint_holds_adapters_and_resumes_to_the_same_update(lora_run):
    r = lora_run
    saved = export.load_checkpoint(r["run_dir"] / "checkpoints" / "2")
    assert saved and all(k.endswith(("_lora_a", "_lora_b")) for k in saved)
    again = r["build"](r["cfg"], make_plan(r["cfg"]), r["run_dir"])
    store = again.checkpoint_store(str(r["run_dir"] / "checkpoints"), keep=2)
    store.resume(store.restore(2))
    store.close()
    r["step"](again, 2)
    after = again.policy_state()
    for k in lora.adapter_names(after):
        np.testing.assert_allclose(after[k], r["after"][k], rtol=1e-5, atol=1e-6, err_msg=k)


@pytest.mark.slow
def test_lora_export_merges_to_the_policy_logits(lora_run, tmp_path):
    import jax.numpy as jnp

    require_torch()
    r = lora_run
    m = r["cfg"].model
    out = export.write(tmp_path / "export", r["engine"].policy_state(), m, None)
    tokens = np.array([BOS, 40, 41, 17, 20, 90, 33, 5, 60, 61], dtype=np.int32)
    T = len(tokens)
    actor = r["engine"].cluster.actor_trainer.model
    ours = np.asarray(actor(jnp.asarray(tokens[None]), jnp.arange(T)[None], None,
                            jnp.tril(jnp.ones((T, T), bool))[None])[0][0])
    np.testing.assert_allclose(hf_logits(out, tokens), ours, rtol=1e-4, atol=1e-4)
    m.lora.adapters_only = True
    try:
        peft_dir = export.write(tmp_path / "adapters", r["engine"].policy_state(), m, None)
    finally:
        m.lora.adapters_only = False
    assert sorted(p.name for p in peft_dir.iterdir()) == [lora.PEFT_CONFIG, lora.PEFT_WEIGHTS]
