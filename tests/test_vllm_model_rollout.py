"""Settings a model needs under one rollout engine: conf/config.yaml's optional
`model_rollout: ${model}_${rollout}` entry (Hydra's "specialized configuration" pattern) picks
conf/model_rollout/<model>_<rollout>.yaml. The tiny model gets head_dim 32 under rollout=vllm
(vLLM's CPU attention has no kernel for its 16); everything else composes as before, a command's
model.head_dim still wins, and the pre-flight composes what `python -m rlexp --cfg job` prints."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose
from omegaconf import OmegaConf

from helpers import cli
from rlexp.config.paths import conf_dir
from rlexp.launch.preflight import preflight

CONF = conf_dir()
SPECIALIZED = sorted(p.stem for p in (CONF / "model_rollout").glob("*.yaml"))


def test_tiny_gets_head_dim_32_under_vllm_only(compose_config):
    assert compose_config("rollout=vllm").model.head_dim == 32
    assert compose_config().model.head_dim == 16
    assert compose_config("rollout=vanilla").model.head_dim == 16
    # another model under vLLM keeps its own (SmolLM2's 64)
    assert compose_config("rollout=vllm", "model=smollm2-135m").model.head_dim == 64


@pytest.mark.parametrize("value", [16, 64])
def test_the_command_line_wins(compose_config, value):
    assert compose_config("rollout=vllm", f"model.head_dim={value}").model.head_dim == value


@pytest.mark.parametrize("stem", SPECIALIZED)
def test_each_file_names_a_model_and_a_rollout_and_lands_under_model(compose_config, stem):
    """<model>_<rollout>.yaml of existing options; its keys are model keys it sets."""
    models = {p.stem for p in (CONF / "model").glob("*.yaml")}
    rollouts = {p.stem for p in (CONF / "rollout").glob("*.yaml")}
    pairs = [(m, r) for m in models for r in rollouts if stem == f"{m}_{r}"]
    assert len(pairs) == 1, f"{stem}: not <model>_<rollout> of conf/model and conf/rollout"
    model, rollout = pairs[0]
    path = CONF / "model_rollout" / f"{stem}.yaml"
    assert path.read_text().startswith("# @package model\n")
    values = yaml.safe_load(path.read_text())
    cfg = compose_config(f"model={model}", f"rollout={rollout}")
    assert {k: getattr(cfg.model, k) for k in values} == values


# The recipe that picks rollout=vllm itself (llama3.1-8b), a vanilla one switched to vLLM
# (gemma3-1b), and the tiny model under vLLM through each route (the recipe's choice, the CLI's).
@pytest.mark.parametrize("overrides,head_dim", [
    (["experiment=maxtext_llama3.1-8b_grpo"], 128),
    (["experiment=tunix_gemma3-1b_lora_grpo", "rollout=vllm"], 256),
    (["experiment=maxtext_llama3.1-8b_grpo", "model=tiny"], 32),
    (["experiment=quick", "rollout=vllm"], 32)])
def test_experiments_compose_as_without_the_entry(hydra_conf, overrides, head_dim):
    """An experiment recipe is the config it was before the entry (~model_rollout drops it),
    but for the tiny model under vLLM (every recipe composes in test_recipes.py)."""
    cfg = compose("config", overrides=overrides)
    before = compose("config", overrides=[*overrides, "~model_rollout"])
    assert cfg.model.head_dim == head_dim
    if cfg.model.name == "tiny":
        assert (cfg.rollout.name, before.model.head_dim) == ("vllm", 16)
        before.model.head_dim = 32
    assert OmegaConf.to_container(cfg) == OmegaConf.to_container(before)


def test_an_experiment_that_picks_vllm_specializes_tiny_in_preflight_and_hydra(tmp_path: Path):
    """A user's experiment that chooses rollout=vllm in its defaults list (the command names no
    rollout): the entry sees that choice, in the pre-flight's compose and in Hydra's main."""
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "tiny_on_vllm.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /rollout: vllm\ntrain:\n  steps: 3\n")
    argv = ["--config-dir", str(tmp_path / "conf"), "experiment=tiny_on_vllm"]
    pre = preflight(["--cfg", "job", *argv])
    job = pre.jobs[0]
    assert (job.rollout.name, job.model.name, job.model.head_dim, job.train.steps) == \
        ("vllm", "tiny", 32, 3)
    proc = cli("--cfg", "job", *argv, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    printed = yaml.safe_load(proc.stdout)
    assert (printed["rollout"]["name"], printed["model"]["head_dim"]) == ("vllm", 32)
