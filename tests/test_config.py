"""Every option of every group composes and validates; bad input is one line and exit 2."""

from __future__ import annotations

import pytest

from rlexp.launch.preflight import preflight
from rlexp.config.schema import Config
from rlexp.config.validate import validate
from rlexp.base.errors import UserError
from rlexp.config.naming import run_name, sweep_name
from rlexp.config.paths import conf_dir
from helpers import cli, one_line_exit_2

CONF = conf_dir()
GROUPS = sorted(p.name for p in CONF.iterdir() if p.is_dir() and p.name != "hydra")


def _options(group: str) -> list[str]:
    return sorted(p.stem for p in (CONF / group).glob("*.yaml"))


@pytest.mark.parametrize(
    "group,option", [(g, o) for g in GROUPS if g not in ("experiment", "recipe", "model_rollout")
                     for o in _options(g)])
def test_every_group_option_composes_and_validates(group, option, compose_config):
    overrides = [f"{group}={option}"]
    if group == "hardware" and option != "cpu":
        overrides.append("run.dry_run=true")
    cfg = compose_config(*overrides)
    assert getattr(cfg, group).name == option


def test_required_groups_and_options_exist():
    want = {"model": {"tiny", "qwen3-0.6b", "llama3.1-8b", "llama3.1-70b"},
            "algo": {"grpo", "gspo"},
            "hardware": {"cpu", "v5p-8", "v6e-8", "v5p-64", "gpu"},
            "dataset": {"arithmetic", "gsm_symbolic", "gsm8k"},
            "rollout": {"vanilla", "vllm"}, "tracker": {"mlflow", "none"}}
    for group, options in want.items():
        assert options <= set(_options(group)), group


def test_cli_override_values_reach_the_dataclass(compose_config):
    cfg = compose_config("algo=gspo", "hardware=v6e-8", "algo.beta=0.08", "train.steps=7")
    assert (cfg.algo.name, cfg.hardware.name, cfg.algo.beta, cfg.train.steps) == ("gspo", "v6e-8", 0.08, 7)
    assert cfg.hardware.devices == 8


@pytest.mark.parametrize("overrides,needle", [
    (["algo=ppo"], "valid choices are: cispo, clip_cov, dapo, dr_grpo, dro, gmpo, grpo, gspo"),
    (["+algo.clip_epsilon=0.3"], "algo.clip_epsilon is not a config key"),
    (["algo.clip=0.3"], "algo.clip is not a config key"),
    (["+foo=1"], "foo is not a config key"),
    (["algo.num_generations=1"], "algo.num_generations=1 is invalid"),
    (["train.steps=abc"], "train.steps='abc' is invalid"),
    (["algo.epsilon=1.5"], "algo.epsilon=1.5 is invalid"),
    (["algo.epsilon=0.2", "algo.epsilon_high=0.1"], "algo.epsilon_high=0.1 is invalid"),
    (["algo.beta=-1"], "algo.beta=-1"),
    (["algo.kl_estimator=k4"], "valid choices are k1, k2, k3"),
    (["train.batch_size=8", "train.mini_batch_size=3"], "train.mini_batch_size=3"),
    (["hydra/launcher=nope"], "valid choices are: basic"),
    (["experiment=nope"], "experiment=nope is not an option"),
    (["algo.beta=0,0.1"], "add -m"),
    (["-m", "algo.beta=0,0.1", "algo.num_generations=2,1"], "algo.num_generations=1 is invalid"),
])
def test_bad_input_is_one_clear_line(overrides, needle):
    with pytest.raises(UserError) as err:
        preflight(overrides)
    message = str(err.value)
    assert needle in message
    assert "\n" not in message


def test_sweep_expands_like_hydra():
    pre = preflight(["-m", "algo.beta=0,0.04,0.08", "algo.epsilon=0.1,0.2"])
    assert pre.multirun and len(pre.jobs) == 6
    assert sorted({(j.algo.beta, j.algo.epsilon) for j in pre.jobs}) == sorted(
        (b, e) for b in (0.0, 0.04, 0.08) for e in (0.1, 0.2))


def test_validate_rejects_bad_mesh():
    cfg = Config()
    cfg.hardware.trainer_mesh.fsdp = 2
    with pytest.raises(UserError, match="hardware.trainer_mesh"):
        validate(cfg)


def test_run_names_are_deterministic_and_readable():
    choices = {"algo": "gspo", "model": "tiny", "dataset": "arithmetic", "hardware": "v6e-8"}
    a = run_name(choices, ["algo=gspo", "algo.beta=0.04", "run.resume=false"])
    b = run_name(choices, ["algo.beta=0.04", "algo=gspo"])
    assert a == b and a.startswith("gspo-tiny-arithmetic-v6e-8-beta0.04_")
    assert run_name(choices, []) == "gspo-tiny-arithmetic-v6e-8"
    assert run_name(choices, ["algo.beta=0.08"]) != run_name(choices, ["algo.beta=0.04"])
    assert sweep_name(["algo.beta=0,0.04", "train.steps=2"]).startswith("beta0_0.04-steps2_")


@pytest.mark.parametrize("args,key", [
    (["algo=ppo"], "algo"),
    (["+algo.clip_epsilon=0.3"], "algo.clip_epsilon"),
    (["algo.num_generations=1"], "algo.num_generations"),
    (["train.steps=abc"], "train.steps"),
])
def test_entry_point_exits_2_with_one_line(tmp_path, args, key):
    one_line_exit_2(cli(*args, cwd=tmp_path), key)
    assert not (tmp_path / "outputs").exists()  # nothing half-made


def test_cfg_job_prints_the_composed_config(tmp_path):
    proc = cli("--cfg", "job", "algo=gspo", "hardware=v6e-8", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "name: gspo" in proc.stdout and "name: v6e-8" in proc.stdout


def test_help_lists_groups(tmp_path):
    proc = cli("--help", cwd=tmp_path)
    assert proc.returncode == 0
    profiles = ", ".join(sorted(p.stem for p in (conf_dir() / "hardware").glob("*.yaml")))
    assert {"cpu", "gpu", "v4-64", "v5p-8", "v5p-64", "v5p-128", "v5p-256", "v6e-8"} <= \
        set(profiles.split(", "))
    for line in ("algo: cispo, clip_cov, dapo, dr_grpo, dro, gmpo, grpo, gspo, kl_cov",
                 f"hardware: {profiles}"):
        assert line in proc.stdout


@pytest.mark.parametrize("value,interval,ok", [
    (0, "[0, inf)", True), (-1, "[0, inf)", False), (0, "(0, inf)", False),
    (1, "(0, 1]", True), (1, "(0, 1)", False), (0.5, "(0, 1)", True),
    (float("inf"), "(0, inf)", False), (float("nan"), "(-inf, inf)", False),
    (-3.5, "(-inf, inf)", True), (4294967295, "[0, 4294967295]", True),
])
def test_in_range_by_hand(value, interval, ok):
    from rlexp.config.validate import in_range

    assert in_range(value, interval) is ok


def test_the_schemas_own_defaults_pass_the_validator():
    """Config() as the dataclasses build it (every recipe: test_recipes.py)."""
    validate(Config())


def test_run_cache_dir_defaults_to_rlexp_cache_dir_and_an_override_wins(monkeypatch, tmp_path):
    from rlexp.launch.preflight import preflight

    monkeypatch.delenv("RLEXP_CACHE_DIR", raising=False)
    assert preflight(["run.dry_run=true"]).jobs[0].run.cache_dir == "outputs/cache"
    monkeypatch.setenv("RLEXP_CACHE_DIR", str(tmp_path / "shared"))
    assert preflight(["run.dry_run=true"]).jobs[0].run.cache_dir == str(tmp_path / "shared")
    given = preflight(["run.dry_run=true", f"run.cache_dir={tmp_path / 'mine'}"])
    assert given.jobs[0].run.cache_dir == str(tmp_path / "mine")
