"""The run plan: memory per device against hand computation, feasibility of every model x
hardware pair, one-line refusals, and (slow) the estimate against measured memory."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlexp.config.schema import Config
from rlexp.planning.memory import (GIB, activation_factor, memory_plan, param_count,
                          rollout_micro_prompts, sharding_problem)
from rlexp.planning.plan import make_plan
from helpers import cli, said
from rlexp.base.runtime import environment  # os.environ copied safely from other threads

ROOT = Path(__file__).resolve().parents[1]
MODELS = ("tiny", "smollm2-135m", "qwen3-0.6b", "llama3.1-8b", "llama3.1-70b")
HARDWARE = ("cpu", "gpu", "gpu-h200", "v5p-8", "v6e-8", "v5p-64")


@pytest.fixture()
def pair(compose_config):
    """pair(model, hw, *extra) -> the Config of model=<model> on hardware <hw> (gpu-h200: the
    gpu profile with gpu_type=h200)."""

    def compose_pair(model: str, hw: str, *extra: str) -> Config:
        hw_over = (["hardware=gpu", "hardware.gpu_type=h200"] if hw == "gpu-h200"
                   else [f"hardware={hw}"])
        return compose_config(f"model={model}", *hw_over, *extra)

    return compose_pair


# ---------------------------------------------------------------------- parameter counts


@pytest.mark.parametrize("model,published", [
    ("qwen3-0.6b", 596_049_920),      # Qwen/Qwen3-0.6B safetensors total
    ("llama3.1-8b", 8_030_261_248),   # meta-llama/Llama-3.1-8B
    ("llama3.1-70b", 70_553_706_496),  # meta-llama/Llama-3.1-70B
    ("smollm2-135m", 134_515_008),    # HuggingFaceTB/SmolLM2-135M
])
def test_param_count_matches_the_published_checkpoints(model, published, compose_config):
    assert param_count(compose_config(f"model={model}").model) == published


# ------------------------------------------------------------------ memory by hand


# The by-hand shape: bf16 weights and compute, 32 + 8 tokens, no remat, 8 prompts x 4.
HAND = ("model.param_dtype=bfloat16", "rollout.max_prompt_length=32",
        "rollout.max_completion_length=8", "rollout.kv_cache_size=64", "train.remat=none",
        "train.batch_size=8", "algo.num_generations=4")


def test_memory_items_by_hand_llama8b_on_v6e8(pair):
    cfg = pair("llama3.1-8b", "v6e-8", *HAND)
    mem = memory_plan(cfg)
    p, shards = 8_030_261_248, 8  # bf16 weights, fsdp=8 x tp=1
    assert mem.trainer["policy"] == pytest.approx(p * 2 / shards)
    assert mem.trainer["reference"] == pytest.approx(p * 2 / shards)  # beta=0.04 > 0
    assert mem.trainer["optimizer"] == pytest.approx(p * 4 / shards)  # 2 bf16 moments
    assert mem.trainer["new weights"] == pytest.approx(p * 2 / shards)
    assert mem.trainer["gradients"] == 0  # no accumulation: fused into the update
    # Same mesh for both roles: Tunix shares the weights, no rollout copy.
    assert mem.rollout["rollout weights"] == 0
    # kv cache = batch x G x kv_cache_size x layers x 2 x kv_heads x head_dim x bytes (unsharded)
    assert mem.rollout["kv cache"] == 8 * 4 * 64 * 32 * 2 * 8 * 128 * 2
    # activations = rows x seq x hidden x (layers x factor + per-token) x bytes / (fsdp x tp)
    rows, seq = 8 * 4, 32 + 8
    factor = (0.5 * 4096 + 3 * 4096 + 5 * 1024 + 5.5 * 14336 + 3.5 * 32 * seq) / 4096
    assert activation_factor(cfg.model, seq) == pytest.approx(factor)
    assert mem.trainer["activations"] == pytest.approx(rows * seq * 4096 * (32 * factor + 13) * 2 / 8)
    assert mem.trainer["logits"] == pytest.approx(rows * seq * 128256 * 1.75 * 4 / 8)
    persistent = mem.trainer["policy"] * 2 + mem.trainer["optimizer"]
    train = mem.trainer["new weights"] + mem.trainer["activations"] + mem.trainer["logits"]
    roll = mem.rollout["kv cache"] + mem.rollout["sampler logits"]
    assert mem.peak == pytest.approx(persistent + max(train, roll))
    assert mem.capacity == 32 * GIB


def test_float32_master_weights_with_bfloat16_compute(pair):
    # qwen3 computes in model.dtype: weights, new weights and AdamW moments in float32, the
    # reference and the KV cache in bfloat16, activations in bfloat16 bytes off CPU.
    over = [o for o in HAND if not o.startswith("model.param_dtype")]
    mixed = memory_plan(pair("qwen3-0.6b", "v5p-8", "model.param_dtype=float32", *over))
    bf16 = memory_plan(pair("qwen3-0.6b", "v5p-8", "model.param_dtype=bfloat16", *over))
    p, shards = 596_049_920, 4
    assert mixed.trainer["policy"] == pytest.approx(p * 4 / shards)
    assert mixed.trainer["new weights"] == pytest.approx(p * 4 / shards)
    assert mixed.trainer["optimizer"] == pytest.approx(p * 8 / shards)
    assert mixed.trainer["reference"] == pytest.approx(p * 2 / shards)
    assert bf16.trainer["optimizer"] == pytest.approx(p * 4 / shards)
    assert mixed.trainer["activations"] == pytest.approx(bf16.trainer["activations"])
    assert mixed.rollout["kv cache"] == pytest.approx(bf16.rollout["kv cache"])
    # llama3 too (rlexp casts its float32 weights to bfloat16 on entry to the forward).
    llama = memory_plan(pair("smollm2-135m", "gpu", "model.dtype=bfloat16", *over,
                             "model.param_dtype=float32"))
    llama_bf16 = memory_plan(pair("smollm2-135m", "gpu", "model.dtype=bfloat16", *HAND))
    assert llama.trainer["activations"] == pytest.approx(llama_bf16.trainer["activations"])
    assert llama.trainer["policy"] == pytest.approx(2 * llama_bf16.trainer["policy"])


def test_remat_keeps_one_hidden_vector_per_layer(pair):
    base = ("model.param_dtype=bfloat16", "rollout.max_prompt_length=128",
            "rollout.max_completion_length=128", "rollout.kv_cache_size=256",
            "train.batch_size=8", "algo.num_generations=4")
    cfg = pair("llama3.1-8b", "v6e-8", *base, "train.remat=full")
    full = memory_plan(cfg)
    none = memory_plan(pair("llama3.1-8b", "v6e-8", *base, "train.remat=none"))
    dots = memory_plan(pair("llama3.1-8b", "v6e-8", *base, "train.remat=dots_saveable"))
    rows, seq, h = 8 * 4, 256, 4096
    # layers x 1 stored input + one layer recomputed + the per-token terms, bf16, fsdp=8
    units = 32 * 1.0 + activation_factor(cfg.model, seq) + 13
    assert full.trainer["activations"] == pytest.approx(rows * seq * h * units * 2 / 8)
    # dots: q (4096) + k, v (2 x 1024) + o, down (2 x 4096) + gate, up (2 x 14336) per layer
    dots_units = 32 * (2 * 4096 + 4096 + 2 * 1024 + 2 * 14336) / 4096 + 3.5 * 32 * seq / 4096 + 13
    assert dots.trainer["activations"] == pytest.approx(rows * seq * h * dots_units * 2 / 8)
    assert full.trainer["activations"] < dots.trainer["activations"] < none.trainer["activations"]
    assert full.trainer["logits"] == none.trainer["logits"]


def test_rollout_micro_batch_caps_the_kv_cache(pair):
    over = [*HAND, "train.batch_size=16"]
    whole = memory_plan(pair("llama3.1-8b", "v6e-8", *over))
    micro = memory_plan(pair("llama3.1-8b", "v6e-8", *over, "rollout.micro_batch_size=4"))
    assert whole.rollout["kv cache"] == 16 * 4 * 64 * 32 * 2 * 8 * 128 * 2
    assert micro.rollout["kv cache"] == pytest.approx(whole.rollout["kv cache"] / 4)
    assert micro.rollout["sampler logits"] == pytest.approx(whole.rollout["sampler logits"] / 4)
    # Unset, an accelerator's sampler takes more than the train micro batch when a training
    # slice that size fits (here the whole batch), the CPU's follows the train micro batch.
    train_micro = memory_plan(pair("llama3.1-8b", "v6e-8", *over, "train.micro_batch_size=4"))
    assert train_micro.rollout["kv cache"] == pytest.approx(whole.rollout["kv cache"])
    on_cpu = pair("llama3.1-8b", "cpu", *over, "train.micro_batch_size=4")
    assert rollout_micro_prompts(on_cpu) == 4


def test_an_unset_rollout_micro_batch_is_planned_on_an_accelerator(pair):
    """The largest multiple of the train micro batch (dividing the mini batch) at which a
    training slice would fit: it fits, the next one up does not; a set value always wins."""
    shape = ("smollm2-135m", "gpu", "train.batch_size=64")  # the recipe's micro batch: 4
    got = rollout_micro_prompts(pair(*shape))
    assert got > 4 and 64 % got == 0 and got % 4 == 0

    def fits(prompts: int) -> bool:
        return make_plan(pair(*shape, f"train.micro_batch_size={prompts}",
                              f"rollout.micro_batch_size={prompts}")).fits

    assert fits(got)
    bigger = [d for d in range(got + 1, 65) if 64 % d == 0 and d % 4 == 0]
    assert not bigger or not fits(bigger[0])
    assert rollout_micro_prompts(pair(*shape, "rollout.micro_batch_size=2")) == 2
    assert rollout_micro_prompts(pair("smollm2-135m", "cpu", "train.batch_size=64")) == 4


def test_beta_zero_drops_the_reference(pair):
    with_ref = memory_plan(pair("qwen3-0.6b", "v5p-8"))
    without = memory_plan(pair("qwen3-0.6b", "v5p-8", "algo.beta=0"))
    assert without.trainer["reference"] == 0
    assert with_ref.peak - without.peak == pytest.approx(with_ref.trainer["reference"])


def test_off_policy_sampling_beside_the_update_holds_both_phases(pair):
    """Two meshes over the same chips: with rollout.off_policy_steps the sampler's KV cache and
    the update's activations are live at once; one mesh samples first, then updates."""
    other = ("hardware.rollout_mesh={fsdp: 1, tp: 4}",)
    on = memory_plan(pair("qwen3-0.6b", "v5p-8", *other))
    off = memory_plan(pair("qwen3-0.6b", "v5p-8", *other, "rollout.off_policy_steps=1"))
    t, r = off.trainer, off.rollout
    phases = (t["new weights"] + t["activations"] + t["logits"], r["kv cache"]
              + r["sampler logits"])
    assert off.peak - on.peak == pytest.approx(min(phases))
    one_mesh = [memory_plan(pair("qwen3-0.6b", "v5p-8", f"rollout.off_policy_steps={k}")).peak
                for k in (0, 1)]
    assert one_mesh[0] == one_mesh[1]


def test_gradient_accumulation_keeps_a_gradient_buffer(pair):
    cfg = pair("qwen3-0.6b", "cpu", "train.mini_batch_size=8", "train.micro_batch_size=2")
    mem = memory_plan(cfg)
    assert mem.trainer["gradients"] == pytest.approx(596_049_920 * 4)  # float32 master
    full = memory_plan(pair("qwen3-0.6b", "cpu", "train.micro_batch_size=null"))  # one slice
    assert mem.trainer["activations"] == pytest.approx(full.trainer["activations"] / 4)


def test_split_roles_hold_their_own_items(pair):
    mem = memory_plan(pair("llama3.1-70b", "v5p-64"))
    p = 70_553_706_496
    assert not mem.colocated
    assert mem.trainer["policy"] == pytest.approx(p * 4 / 16)  # float32 master by default
    assert mem.rollout["rollout weights"] == pytest.approx(p * 4 / 16)
    trainer_dev = sum(v for k, v in mem.trainer.items())
    rollout_dev = sum(mem.rollout.values())
    assert mem.peak == pytest.approx(max(trainer_dev, rollout_dev))


def test_a_different_rollout_mesh_costs_a_weight_copy(pair):
    cfg = pair("llama3.1-8b", "v5p-8", "hardware.rollout_mesh.fsdp=1", "hardware.rollout_mesh.tp=4")
    mem = memory_plan(cfg)
    assert mem.rollout["rollout weights"] == pytest.approx(8_030_261_248 * 4 / 4)


def test_bfloat16_on_cpu_is_costed_in_float32(pair):
    # XLA:CPU upcasts bf16 arithmetic: the same model costs more activations on CPU.
    cpu = memory_plan(pair("qwen3-0.6b", "cpu"))
    gpu = memory_plan(pair("qwen3-0.6b", "gpu"))
    assert cpu.trainer["activations"] == pytest.approx(2 * gpu.trainer["activations"])
    assert cpu.trainer["policy"] == gpu.trainer["policy"]


# ------------------------------------------------------------------------- feasibility

# (model, hardware) pairs that cannot run with the default settings (each model's recipe, or
# the schema's real-model defaults: 8 prompts x 4 of 256 + 768 tokens, remat, f32 master).
INFEASIBLE = {
    # (qwen3-0.6b fits a 24 GiB CPU host through its recipe's micro batch of 1 prompt.)
    ("llama3.1-8b", "cpu"), ("llama3.1-8b", "gpu"),          # ~210 GiB on one device
    ("llama3.1-8b", "gpu-h200"),
    ("llama3.1-70b", "cpu"), ("llama3.1-70b", "gpu"), ("llama3.1-70b", "gpu-h200"),
    ("llama3.1-70b", "v5p-8"), ("llama3.1-70b", "v6e-8"),   # needs the v5p-64 split
}


@pytest.mark.parametrize("model", MODELS)
@pytest.mark.parametrize("hw", HARDWARE)
def test_feasibility_of_every_model_hardware_pair(model, hw, pair):
    plan = make_plan(pair(model, hw))
    assert plan.fits == ((model, hw) not in INFEASIBLE), plan.why
    if plan.fits:
        assert plan.why == ""
        assert any(line.startswith("memory") for line in plan.lines)
        assert any("fits" in line for line in plan.lines)
    else:
        hw_name = "gpu" if hw == "gpu-h200" else hw
        assert "\n" not in plan.why
        assert plan.why.startswith(f"model={model} hardware={hw_name}: needs ")
        assert "GiB per device, has " in plan.why


def test_why_names_the_numbers(pair):
    plan = make_plan(pair("llama3.1-70b", "v6e-8"))
    gib = plan.memory_total / GIB
    assert f"needs {gib:.1f} GiB per device, has 32 " in plan.why
    assert plan.lines[-1] == f"cannot run: {plan.why}"


def test_plan_lines_show_mesh_and_memory_by_item(pair):
    plan = make_plan(pair("llama3.1-70b", "v5p-64"))
    text = "\n".join(plan.lines)
    assert "split: trainer devices 0-15 (fsdp=16, tp=1), rollout devices 16-31" in text
    for item in ("policy", "reference", "optimizer", "activations", "rollout weights", "kv cache"):
        assert f"{item} " in text
    assert "of 95 GiB" in text
    assert plan.devices == 32


def test_mesh_axis_that_does_not_divide_the_heads_is_refused(pair):
    cfg = pair("smollm2-135m", "v6e-8", "hardware.rollout_mesh.fsdp=1",
               "hardware.rollout_mesh.tp=8")
    assert sharding_problem(cfg) == (
        "hardware.rollout_mesh.tp=8 does not divide model.num_heads=9 (model=smollm2-135m "
        "hardware=v6e-8); use a tp that divides it, e.g. hardware.rollout_mesh.tp=1 "
        "hardware.rollout_mesh.fsdp=8")
    assert not make_plan(cfg).fits


def test_emulation_must_fit_this_host(monkeypatch, pair):
    monkeypatch.setattr("rlexp.planning.plan.local_ram_bytes", lambda: 24 * GIB)
    plan = make_plan(pair("llama3.1-8b", "v5p-8", "hardware.emulate=true"))
    assert not plan.fits
    assert plan.why.startswith("model=llama3.1-8b hardware=v5p-8 (emulated): needs ")
    assert "memory for 4 virtual devices, has 24.0" in plan.why
    assert make_plan(pair("tiny", "v5p-64", "hardware.emulate=true")).fits


def test_make_plan_imports_no_jax():
    code = ("import sys; from rlexp.config.schema import Config; from rlexp.planning.plan import make_plan; "
            "make_plan(Config()); assert 'jax' not in sys.modules and 'tunix' not in sys.modules")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)


# --------------------------------------------------------------- through the entry point


def test_dry_run_of_a_feasible_pair_prints_the_plan():
    proc = cli("model=llama3.1-70b", "hardware=v5p-64", "run.dry_run=true", "tracker=none",
               cwd=ROOT)
    assert "rollout devices 16-31" in proc.stdout
    assert "fits" in proc.stdout
    # The plan is printed, then the dry run fails as the real run would: no model.path.
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert said(proc.stderr) == [
        "rlexp: error: model=llama3.1-70b needs model.path (a local Hugging Face dir, a hub id "
        "or a gs:// path): random init is only for the tiny model"]


def test_infeasible_pair_exits_2_with_one_line():
    # A dry run: a real run of a hub-less real model stops earlier, at model.path.
    proc = cli("model=llama3.1-70b", "hardware=v6e-8", "tracker=none", "run.dry_run=true",
               cwd=ROOT)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    err = said(proc.stderr)
    assert len(err) == 1
    assert "model=llama3.1-70b hardware=v6e-8: needs" in err[0]


# ------------------------------------------------------------- estimate vs measurement


@pytest.mark.slow
def test_estimate_within_25_percent_of_measured_memory():
    """The tiny model: a run built by rlexp.engine.build, two GRPO steps; live arrays plus
    XLA's buffer assignment of the trainer's and sampler's programs
    (bench/memory_calibration.py --engine), in a fresh process. SmolLM2-135M is the bench's
    second check config (plan/measured 0.815 when last run); it is left to the bench, where
    it took most of this test's 140 s."""
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / "memory_calibration.py"),
                           "--engine", "model=tiny"], capture_output=True, text=True,
                          timeout=1200, cwd=ROOT,
                          env={k: v for k, v in environment().items() if k != "XLA_FLAGS"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    assert [r["config"] for r in results] == ["custom"]
    for r in results:
        assert 0.75 <= r["ratio"] <= 1.25, r


# ------------------------------------------------------- refusals that name the fix, recipes

# The 32 x 8 x (128 + 128) step, in one slice (the smollm2 recipe accumulates over 4).
BIG_STEP = ("train.batch_size=32", "algo.num_generations=8", "rollout.max_prompt_length=128",
            "rollout.max_completion_length=128", "train.micro_batch_size=null")


def test_refusal_names_the_micro_batch_that_fits_and_it_does(pair):
    plan = make_plan(pair("smollm2-135m", "gpu", *BIG_STEP))
    assert not plan.fits
    assert "it fits with train.micro_batch_size=" in plan.why
    fix = plan.why.split("it fits with ", 1)[1].split(" (", 1)[0].split()
    assert all(f.startswith(("train.micro_batch_size=", "train.remat=")) for f in fix)
    assert make_plan(pair("smollm2-135m", "gpu", *BIG_STEP, *fix)).fits
    # The micro batch named is the largest that fits: one size up does not.
    micro = int(fix[0].split("=")[1])
    bigger = [d for d in range(micro + 1, 33) if 32 % d == 0][0]
    assert not make_plan(pair("smollm2-135m", "gpu", *BIG_STEP,
                              f"train.micro_batch_size={bigger}")).fits


def test_a_gpu_plan_names_a_larger_update_micro_batch_that_fits(pair):
    """SmolLM2's recipe slices the update 4 prompts at a time (sized for host RAM); on a GPU
    the plan names the largest micro batch that fits, which does, one size up does not."""
    from rlexp.planning.plan import largest_fitting_micro

    cfg = pair("smollm2-135m", "gpu", "train.batch_size=64")
    assert cfg.train.micro_batch_size == 4
    hints = [line for line in make_plan(cfg).lines if line.startswith("hint")]
    assert len(hints) == 1, make_plan(cfg).lines
    best = largest_fitting_micro(cfg)
    assert f"train.micro_batch_size={best} also fits (4 now)" in hints[0]
    assert 4 < best < 64 and 64 % best == 0
    assert make_plan(pair("smollm2-135m", "gpu", "train.batch_size=64",
                          f"train.micro_batch_size={best}")).fits
    bigger = [d for d in range(best + 1, 65) if 64 % d == 0][0]
    assert not make_plan(pair("smollm2-135m", "gpu", "train.batch_size=64",
                              f"train.micro_batch_size={bigger}")).fits
    # At the largest size, and on the CPU (where the recipe's size is the point), no hint.
    at_best = make_plan(pair("smollm2-135m", "gpu", "train.batch_size=64",
                             f"train.micro_batch_size={best}"))
    assert not any(line.startswith("hint") for line in at_best.lines)
    assert not any(line.startswith("hint") for line in
                   make_plan(pair("smollm2-135m", "cpu", "train.batch_size=64")).lines)


def test_refusal_names_remat_when_micro_batching_alone_is_not_enough(pair):
    # One prompt per slice still does not fit without remat; remat makes it fit.
    over = ("model.param_dtype=bfloat16", "train.remat=none", "train.batch_size=8",
            "rollout.max_prompt_length=1024", "rollout.max_completion_length=3072",
            "rollout.kv_cache_size=4352")
    plan = make_plan(pair("llama3.1-8b", "v6e-8", *over))
    assert not plan.fits
    assert "train.remat=full" in plan.why, plan.why
    fix = plan.why.split("it fits with ", 1)[1].split(" (", 1)[0].split()
    assert make_plan(pair("llama3.1-8b", "v6e-8", *over, *fix)).fits


def test_nothing_fits_says_so(pair):
    plan = make_plan(pair("llama3.1-70b", "v6e-8"))
    assert "micro-batching and train.remat=full do not make it fit" in plan.why


def test_gpu_memory_figures_are_marked_unverified(pair):
    text = "\n".join(make_plan(pair("smollm2-135m", "gpu")).lines)
    assert "GPU figures unverified" in text
    assert "unverified" not in "\n".join(make_plan(pair("smollm2-135m", "v5p-8")).lines)


def test_real_models_get_real_model_settings(pair):
    cfg = pair("llama3.1-8b", "v5p-8")
    assert 1e-7 <= cfg.train.learning_rate <= 1e-5
    assert cfg.train.lr_schedule == "warmup_cosine" and cfg.train.warmup_steps > 0
    assert cfg.rollout.max_prompt_length >= 256 and cfg.rollout.max_completion_length >= 512
    assert cfg.model.dtype == "bfloat16" and cfg.model.param_dtype == "float32"
    plan = make_plan(cfg)
    assert plan.fits, plan.why
    assert not any(line.startswith("warning") for line in plan.lines)


def test_another_models_recipe_warns_in_one_line(pair):
    plan = make_plan(pair("llama3.1-8b", "v5p-8", "recipe=tiny"))
    warnings = [line for line in plan.lines if line.startswith("warning")]
    assert warnings == ["warning: train.learning_rate=0.001 and 64 + 24 tokens are "
                        "recipe=tiny's settings (made for model=tiny), not model=llama3.1-8b's"]
    plan = make_plan(pair("qwen3-0.6b", "v5p-8", "train.learning_rate=0.001"))
    assert [line for line in plan.lines if line.startswith("warning")] == [
        "warning: train.learning_rate=0.001 is a toy-model value for a 0.60B-parameter model "
        "(real-model RL recipes use 1e-6 to 1e-5)"]
    assert not any(line.startswith("warning") for line in make_plan(pair("tiny", "cpu")).lines)


def test_model_files_carry_only_model_facts():
    import yaml

    for path in sorted((ROOT / "conf" / "model").glob("*.yaml")):
        text = path.read_text()
        assert "@package _global_" not in text, path.name
        keys = set(yaml.safe_load(text))
        assert not keys & {"train", "rollout", "eval", "algo", "warm_start_steps",
                           "warm_start_lr", "warm_start_batch_size"}, path.name


def test_default_run_keeps_the_tiny_recipe(compose_config):
    cfg = compose_config()
    assert (cfg.model.name, cfg.train.steps, cfg.train.batch_size, cfg.train.learning_rate,
            cfg.train.lr_schedule, cfg.train.warmup_steps, cfg.train.grad_clip,
            cfg.train.weight_decay, cfg.train.remat) == (
        "tiny", 900, 32, 1e-3, "cosine", 0, 1.0, 0.0, "none")
    assert (cfg.rollout.max_prompt_length, cfg.rollout.max_completion_length,
            cfg.rollout.kv_cache_size, cfg.eval.every, cfg.eval.num_samples) == (64, 24, 88, 150, 128)
    assert (cfg.model.warm_start_steps, cfg.model.param_dtype) == (300, "float32")
    # recipe=none: the schema's real-model defaults on the same model.
    assert compose_config("recipe=none").train.learning_rate == pytest.approx(3e-6)
