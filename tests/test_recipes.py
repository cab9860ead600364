"""Every experiment= recipe composes on its own hardware, passes the validator and plans to
fit there; the seed recipes carry their sources' values (a comment on every value) and the 70B
Pathways split fits."""

from __future__ import annotations

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
SEEDS = [e for e in EXPERIMENTS if e.startswith(("maxtext_", "tunix_"))]


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
    assert set(SEEDS) >= {"maxtext_llama3.1-8b_grpo", "maxtext_llama3.1-8b_gspo",
                          "maxtext_llama3.1-70b_grpo_pathways", "tunix_grpo_demo",
                          "tunix_qwen3_grpo"}


@pytest.mark.parametrize("name", ["maxtext_llama3.1-8b_grpo", "maxtext_llama3.1-8b_gspo"])
@pytest.mark.parametrize("hw", ["v6e-8", "v5p-8"])
def test_llama8b_seeds_fit_both_single_host_slices(name, hw, compose_config):
    cfg = compose_config(f"experiment={name}", f"hardware={hw}")
    assert make_plan(cfg).fits
    assert cfg.algo.name == ("gspo" if name.endswith("gspo") else "grpo")


def test_maxtext_seed_values(compose_config):
    cfg = compose_config("experiment=maxtext_llama3.1-8b_grpo")
    a, t, r = cfg.algo, cfg.train, cfg.rollout
    assert (a.num_generations, a.num_iterations, a.beta, a.epsilon) == (2, 1, 0.08, 0.2)
    assert (t.learning_rate, t.grad_clip, t.weight_decay, t.batch_size) == (3e-6, 0.1, 0.1, 1)
    assert (r.max_prompt_length, r.max_completion_length, r.kv_cache_size) == (256, 768, 1280)
    assert (r.temperature, r.top_k, r.top_p) == (0.9, 50, 1.0)
    assert (t.checkpoint_every, t.keep_checkpoints) == (50, 10)
    assert cfg.model.param_dtype == "bfloat16"  # rl.yml weight_dtype
    assert [f.weight for f in cfg.reward.functions] == [3.0, 0.5, 3.0, 0.5]


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
    assert plan.memory["rollout weights"] == pytest.approx(p * 2 / 16)
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
