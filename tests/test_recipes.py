"""Every experiment= recipe composes on its own hardware, passes the validator and plans to
fit there; the seed recipes carry their sources' values (a comment on every value) and the 70B
Pathways split fits."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from omegaconf import DictConfig, OmegaConf

from rlexp.config.schema import Config
from rlexp.config.paths import conf_dir
from rlexp.config.validate import validate
from rlexp.planning.plan import make_plan
from helpers import cli

ROOT = Path(__file__).resolve().parents[1]
EXPERIMENTS = sorted(p.stem for p in (conf_dir() / "experiment").glob("*.yaml"))
SEEDS = [e for e in EXPERIMENTS if e.startswith(("maxtext_", "tunix_", "easydel_"))]
# The five seed documents and the recipes that carry each (at least one apiece).
SEED_DOCUMENTS = {
    "MaxText rl.yml + tutorials (8B GRPO/GSPO, 70B Pathways)": (
        "maxtext_llama3.1-8b_grpo", "maxtext_llama3.1-8b_gspo",
        "maxtext_llama3.1-70b_grpo_pathways", "maxtext_llama3.1-70b_grpo_v5p-128"),
    "MaxText GRPO_README.md / grpo_demo.py (defaults, custom run)": (
        "maxtext_grpo_demo", "maxtext_grpo_demo_custom", "maxtext_grpo_demo_llama3.1-70b_pathways"),
    "MaxText experimental/rl README (Llama3.3-70B, v5p-256)": (
        "maxtext_llama3.3-70b_grpo_v5p-256",),
    "EasyDeL GRPO tutorial (NuminaMath-TIR, v4-64, Ray)": ("easydel_grpo_numina_tir",),
    "Tunix GRPO demos (Llama-3.2-1B, Qwen3, Gemma3-1B LoRA)": (
        "tunix_grpo_demo", "tunix_qwen3_grpo", "tunix_gemma3-1b_lora_grpo"),
}


DEFAULT_HARDWARE = next(e.hardware for e in OmegaConf.load(conf_dir() / "config.yaml").defaults
                        if isinstance(e, DictConfig) and "hardware" in e)


def _own_hardware(name: str) -> str:
    """The hardware profile recipe `name` picks in its YAML (its defaults list's override, after
    those of the recipes it extends), else conf/config.yaml's: read from the files, not Hydra."""
    choice = DEFAULT_HARDWARE
    for entry in OmegaConf.load(conf_dir() / "experiment" / f"{name}.yaml").get("defaults", []):
        if isinstance(entry, str) and entry != "_self_":  # a recipe it extends
            choice = _own_hardware(entry)
        elif isinstance(entry, DictConfig) and "override /hardware" in entry:
            choice = entry["override /hardware"]
    return choice


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_recipe_composes_on_its_own_hardware_and_passes_the_validator(name,
                                                                            compose_config):
    """`experiment=<name>` and nothing else (so on the hardware the recipe picks), typed, then
    the validator (ranges, choices, cross-field rules) run on the result once more."""
    cfg = compose_config(f"experiment={name}")
    assert isinstance(cfg, Config)
    assert cfg.hardware.name == _own_hardware(name)
    validate(cfg)


@pytest.mark.parametrize("name", EXPERIMENTS)
def test_every_experiment_plans_to_fit_on_its_own_hardware(name, compose_config):
    plan = make_plan(compose_config(f"experiment={name}"))
    assert plan.fits, plan.why
    assert not any(line.startswith("warning") for line in plan.lines), plan.lines


def test_the_seeds_are_all_there():
    assert len(EXPERIMENTS) >= 9, EXPERIMENTS
    for document, recipes in SEED_DOCUMENTS.items():
        assert set(recipes) <= set(SEEDS), (document, set(recipes) - set(SEEDS))
    assert set(SEEDS) == {r for recipes in SEED_DOCUMENTS.values() for r in recipes}


@pytest.mark.parametrize("name", ["maxtext_llama3.1-8b_grpo", "maxtext_llama3.1-8b_gspo"])
def test_llama8b_seeds_fit_both_single_host_slices(name, compose_config):
    """v5p-8 with the seeds' vLLM share (72% of HBM); v6e-8 too: vLLM's cap of 0.72 x 32 GiB
    holds the trainer's policy and reference, vLLM's weights and a 4.3 GiB KV cache, and
    the rest of the chip the optimizer state and the update (tpu-inference sizes its KV
    cache under the cap, counting what is already resident)."""
    cfg = compose_config(f"experiment={name}", "hardware=v5p-8")
    assert make_plan(cfg).fits and cfg.rollout.name == "vllm"
    assert cfg.rollout.hbm_utilization == 0.72
    assert make_plan(compose_config(f"experiment={name}", "hardware=v6e-8", "rollout=vanilla")).fits
    assert make_plan(compose_config(f"experiment={name}", "hardware=v6e-8",
                                    "rollout.data_parallel_size=8")).fits
    assert cfg.algo.name == ("gspo" if name.endswith("gspo") else "grpo")


@pytest.mark.slow
def test_the_recipes_dry_run_through_the_entry_point():
    """`python -m rlexp experiment=NAME run.dry_run=true` for every recipe, as one sweep of
    dry runs (one process, ~1 s a recipe): exit 0 and a fitting plan each. Every recipe that
    loads weights names its hub id in model.path; no vLLM, math-verify or weights needed."""
    proc = cli("-m", f"experiment={','.join(EXPERIMENTS)}", "run.dry_run=true", "tracker=none",
               cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-1500:]
    assert proc.stdout.count(": fits") == len(EXPERIMENTS), proc.stdout[-3000:]


def test_vllm_recipes_are_refused_in_one_line_without_vllm(tmp_path):
    """A real run of a vLLM recipe where vLLM is not installed: one line naming rollout=vanilla."""
    import importlib.util

    from helpers import one_line_exit_2

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here: the refusal cannot show")
    proc = cli("experiment=maxtext_llama3.1-8b_grpo", "tracker=none",
               f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path)
    one_line_exit_2(proc, "rollout=vllm needs vllm", "rollout=vanilla runs the same recipe")
    assert not (tmp_path / "run").exists()


def test_easydel_seed_values(compose_config):
    cfg = compose_config("experiment=easydel_grpo_numina_tir")
    a, t, r, d = cfg.algo, cfg.train, cfg.rollout, cfg.dataset
    assert (cfg.model.name, cfg.hardware.name, cfg.hardware.devices) == ("aya-expanse-8b", "v4-64",
                                                                         32)
    assert (a.num_generations, a.beta) == (4, 0.04)
    assert (t.lr_schedule, t.learning_rate, t.end_learning_rate, t.warmup_steps) == \
        ("linear", 1e-6, 6e-7, 0)
    # 3 passes over NuminaMath-TIR's 72441 training problems, 8 a step: ceil(217323 / 8).
    assert (t.epochs, t.batch_size, t.steps) == (3, 8, 27166)
    assert (r.max_prompt_length, r.max_completion_length) == (2048, 2048)
    assert (r.temperature, r.top_p, r.top_k) == (0.7, 0.95, 50)
    assert (d.hub, d.reasoning_tag) == ("AI-MO/NuminaMath-TIR", "think")
    assert [f._target_.rsplit(".", 1)[1] for f in cfg.reward.functions] == \
        ["easydel_format", "easydel_accuracy"]  # reward=easydel_numina
    text = (conf_dir() / "experiment" / "easydel_grpo_numina_tir.yaml").read_text()
    assert "aya-expanse-8b" in text and "not one of Tunix's models" in text


def test_maxtext_grpo_demo_defaults_and_custom_run(compose_config):
    base = compose_config("experiment=maxtext_grpo_demo")
    custom = compose_config("experiment=maxtext_grpo_demo_custom")
    got = [(c.model.name, c.algo.num_generations, c.algo.beta, c.algo.epsilon,
            c.train.learning_rate, c.train.steps) for c in (base, custom)]
    assert got == [("llama3.1-8b", 2, 0.08, 0.2, 3e-6, 100),
                   ("llama3.1-8b", 4, 0.04, 0.15, 5e-6, 200)]


def test_70b_on_v5p_256_splits_64_trainer_chips_and_8_samplers_of_8(compose_config):
    cfg = compose_config("experiment=maxtext_llama3.3-70b_grpo_v5p-256")
    h = cfg.hardware
    assert (h.name, h.devices, h.split) == ("v5p-256", 128, "split")
    assert (h.trainer_mesh.fsdp, h.trainer_mesh.tp) == (64, 1)
    assert (h.rollout_mesh.fsdp, h.rollout_mesh.tp) == (8, 8)
    assert (cfg.train.steps, cfg.rollout.sync_every, cfg.model.path) == \
        (20, 5, "meta-llama/Llama-3.3-70B-Instruct")
    plan = make_plan(cfg)
    assert plan.fits, plan.why
    assert "trainer devices 0-63 (fsdp=64, tp=1), rollout devices 64-127 (fsdp=8, tp=8)" in \
        "\n".join(plan.lines)


def test_gemma3_lora_recipe_uses_the_demos_adapter(compose_config):
    cfg = compose_config("experiment=tunix_gemma3-1b_lora_grpo")
    lora = cfg.model.lora
    assert (cfg.model.family, lora.rank, lora.alpha) == ("gemma3", 64, 64.0)
    assert "q_einsum" in lora.targets and "down_proj" in lora.targets
    assert (cfg.algo.num_generations, cfg.train.steps, cfg.train.batch_size) == (2, 3738, 1)


def test_maxtext_seed_values(compose_config):
    cfg = compose_config("experiment=maxtext_llama3.1-8b_grpo")
    a, t, r = cfg.algo, cfg.train, cfg.rollout
    assert (a.num_generations, a.num_iterations, a.beta, a.epsilon) == (2, 1, 0.08, 0.2)
    assert (t.learning_rate, t.grad_clip, t.weight_decay, t.batch_size) == (3e-6, 0.1, 0.1, 1)
    assert (r.max_prompt_length, r.max_completion_length, r.kv_cache_size) == (256, 768, 1280)
    assert (r.temperature, r.top_k, r.top_p) == (0.9, 50, 1.0)
    assert (t.checkpoint_every, t.keep_checkpoints) == (50, 10)
    assert cfg.model.param_dtype == "bfloat16"  # rl.yml weight_dtype
    assert [f.name for f in cfg.reward.functions] == [  # reward=maxtext, utils_rl.py's four
        "match_format_exactly", "match_format_approximately", "check_answer", "check_numbers"]


def test_70b_pathways_splits_trainer_and_sampler_and_fits(compose_config):
    cfg = compose_config("experiment=maxtext_llama3.1-70b_grpo_pathways")
    assert (cfg.model.name, cfg.hardware.name, cfg.hardware.split) == ("llama3.1-70b", "v5p-64", "split")
    plan = make_plan(cfg)
    assert plan.fits, plan.why
    text = "\n".join(plan.lines)
    assert "split: trainer devices 0-15 (fsdp=16, tp=1), rollout devices 16-31" in text
    # The trainer half holds policy, reference and AdamW sharded 16 ways; no rollout items.
    p = 70_553_706_496
    assert plan.memory["policy"] == pytest.approx(p * 2 / 16)
    assert plan.memory["optimizer"] == pytest.approx(p * 2 * 2 / 16)
    # The sampler half: vLLM's 72% of a chip's 95 GiB; Tunix's sampler a bf16 copy, 16 ways.
    assert plan.memory["vllm reserve"] == pytest.approx(0.72 * 95 * 2**30)
    vanilla = make_plan(compose_config("experiment=maxtext_llama3.1-70b_grpo_pathways",
                                       "rollout=vanilla"))
    assert vanilla.fits and vanilla.memory["rollout weights"] == pytest.approx(p * 2 / 16)
    # The same recipe on a single-host v5p-8 (4 chips, colocated) cannot fit.
    small = ("hardware=v5p-8", "hardware.split=colocated", "hardware.trainer_fraction=1",
             "hardware.sampler_fraction=1", "hardware.trainer_mesh.fsdp=4",
             "hardware.rollout_mesh.fsdp=4")
    assert not make_plan(compose_config("experiment=maxtext_llama3.1-70b_grpo_pathways",
                                        *small)).fits


def test_every_seed_value_names_its_source():
    for name in SEEDS:
        lines = (conf_dir() / "experiment" / f"{name}.yaml").read_text().splitlines()
        section = None
        for line in lines:
            if line and not line.startswith((" ", "#", "-")):
                section = line.split(":")[0]
            leaf = line.startswith("  ") and ":" in line and not line.strip().startswith(
                ("#", "-", "functions")) and not line.rstrip().endswith(":")
            if section in ("algo", "rollout", "train", "model") and leaf:
                assert "#" in line, f"{name}.yaml: no source comment on {line.strip()!r}"


def test_the_70b_recipe_dry_runs_through_the_entry_point():
    proc = cli("experiment=maxtext_llama3.1-70b_grpo_pathways", "run.dry_run=true",
               "tracker=none", cwd=ROOT)
    assert proc.returncode == 0, proc.stdout[-1500:] + proc.stderr[-1500:]
    assert "fits" in proc.stdout and "rollout devices 16-31" in proc.stdout


def test_a_missing_optional_reward_package_stops_a_real_run_not_a_dry_run(monkeypatch):
    """math_verify_reward without math-verify: pre-flight refuses the run in one line; the dry
    run plans (its reward terms are probed without it). Setup installs math-verify, so its
    absence is made here: a None in sys.modules is how Python itself marks a module that
    must not import (`import` raises ImportError, find_spec returns None)."""
    from rlexp.base.errors import UserError
    from rlexp.launch.preflight import preflight

    monkeypatch.setitem(sys.modules, "math_verify", None)
    args = ["experiment=easydel_grpo_numina_tir", "tracker=none"]
    with pytest.raises(UserError, match=r"easydel_accuracy needs the math-verify package"):
        preflight(args)
    assert preflight(args + ["run.dry_run=true"]).jobs[0].reward.functions[1].weight == 1.0
