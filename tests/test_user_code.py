"""A user's own code without editing rlexp: a config dir (--config-dir, hydra.searchpath) with
an experiment and a dataset of its own, a reward function in a package of its own, and the
algorithm family (grpo, gspo, dapo, dr_grpo) as one sweep."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
from pathlib import Path

import pytest

from rlexp.launch.preflight import preflight
from rlexp.base.errors import UserError
from helpers import cli, said

PACKAGE = "myrl_e12_user"
ALGOS = """
import numpy as np
from rlexp.algo.algorithm import Algorithm

def leave_one_out(rewards, group_size, scale):
    g = np.asarray(rewards, dtype=np.float64).reshape(-1, group_size)
    baseline = (g.sum(axis=1, keepdims=True) - g) / (group_size - 1)
    return (g - baseline).reshape(-1).astype(np.float32)

# RLOO (Ahmadian et al. 2024, arXiv:2402.14740): each completion's baseline is the mean reward
# of the other completions of its prompt.
RLOO = Algorithm(name="rloo", reference="arXiv:2402.14740", advantages=leave_one_out)
NOT_AN_ALGORITHM = 3
"""
REWARDS = """
def says_answer(prompts, completions, answers, **kwargs):
    return [1.0 if a in c else 0.0 for c, a in zip(completions, answers)]

def wrong_length(prompts, completions, answers, **kwargs):
    return [0.0]
"""


@pytest.fixture
def user(tmp_path: Path) -> Path:
    """tmp_path/pkg (a package), data.jsonl (own field names), prompt.txt, conf/ (config dir)."""
    pkg = tmp_path / "pkg" / PACKAGE
    pkg.mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "rewards.py").write_text(REWARDS)
    (pkg / "algos.py").write_text(ALGOS)
    rows = [{"problem": f"Add {i} and {j}.", "solution": f"The result is {i + j}"}
            for i in range(10) for j in range(10)]
    (tmp_path / "data.jsonl").write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    (tmp_path / "prompt.txt").write_text("Q: {question}\nA:")
    conf = tmp_path / "conf"
    (conf / "dataset").mkdir(parents=True)
    (conf / "experiment").mkdir()
    (conf / "dataset" / "mydata.yaml").write_text(f"""\
name: mydata
_target_: rlexp.data.loaders.generic
path: {tmp_path / "data.jsonl"}
question_field: problem
answer_field: solution
extractor: regex
answer_regex: "result is (\\\\d+)"
prompt_file: {tmp_path / "prompt.txt"}
num_train: 80
num_eval: 8
""")
    (conf / "experiment" / "mine.yaml").write_text(f"""\
# @package _global_
defaults:
  - override /dataset: mydata
reward:
  functions:
    - _target_: {PACKAGE}.rewards.says_answer
      weight: 1.0
      name: says_answer
    - _target_: rlexp.rewards.format_approx_reward
      weight: 0.25
      name: format_approx
train:
  steps: 3
  batch_size: 4
eval:
  every: 0
  num_samples: 4
  pass_k: 1
model:
  warm_start_steps: 0
""")
    (conf / "experiment" / "bad_target.yaml").write_text(f"""\
# @package _global_
reward:
  functions:
    - _target_: {PACKAGE}.no_such_module.fn
""")
    (conf / "experiment" / "bad_length.yaml").write_text(f"""\
# @package _global_
reward:
  functions:
    - _target_: {PACKAGE}.rewards.wrong_length
""")
    (conf / "experiment" / "typo.yaml").write_text("# @package _global_\ntrain:\n  stpes: 3\n")
    return tmp_path


def _user_cli(*args: str, cwd: Path, timeout: int = 120) -> subprocess.CompletedProcess:
    """helpers.cli with the user's package (cwd/pkg) importable, as if installed."""
    path = os.pathsep.join([str(cwd / "pkg"), *filter(None, [os.environ.get("PYTHONPATH")])])
    return cli(*args, cwd=cwd, env={"PYTHONPATH": path}, timeout=timeout)


def test_config_dir_experiment_and_dataset_compose_and_are_typed(user, monkeypatch):
    monkeypatch.syspath_prepend(str(user / "pkg"))
    pre = preflight(["--config-dir", str(user / "conf"), "experiment=mine"])
    (cfg,) = pre.jobs
    assert (cfg.dataset.name, cfg.dataset.question_field, cfg.train.steps) == ("mydata", "problem", 3)
    assert [f.name for f in cfg.reward.functions] == ["says_answer", "format_approx"]
    # the same through hydra.searchpath, and a user YAML is checked against the schema
    pre = preflight([f"hydra.searchpath=[file://{user / 'conf'}]", "experiment=mine"])
    assert pre.jobs[0].dataset.name == "mydata"
    # model/ and hardware/ of the user's too, typed by the same schema
    (user / "conf" / "model").mkdir()
    (user / "conf" / "hardware").mkdir()
    (user / "conf" / "model" / "mytiny.yaml").write_text("name: mytiny\nnum_layers: 1\n")
    (user / "conf" / "hardware" / "mycpu.yaml").write_text("name: mycpu\nhost_memory_gib: 8\n")
    (cfg,) = preflight(["--config-dir", str(user / "conf"), "model=mytiny", "hardware=mycpu",
                        "run.dry_run=true"]).jobs
    assert (cfg.model.num_layers, cfg.hardware.host_memory_gib) == (1, 8.0)
    (user / "conf" / "model" / "bad.yaml").write_text("name: bad\nnum_layer: 1\n")
    with pytest.raises(UserError, match="model.num_layer is not a config key"):
        preflight(["--config-dir", str(user / "conf"), "model=bad", "run.dry_run=true"])
    with pytest.raises(UserError, match="train.stpes is not a config key"):
        preflight(["--config-dir", str(user / "conf"), "experiment=typo"])
    with pytest.raises(UserError, match="experiment=mine is not an option"):
        preflight(["experiment=mine"])  # without the config dir it does not exist
    with pytest.raises(UserError, match="--config-dir .*: directory not found"):
        preflight(["--config-dir", str(user / "nope"), "experiment=mine"])


def test_primary_config_of_the_user_with_its_own_searchpath(user):
    extra = user / "extra" / "experiment"
    extra.mkdir(parents=True)
    (extra / "other.yaml").write_text("# @package _global_\neval:\n  every: 7\n")
    (user / "conf" / "myconfig.yaml").write_text(
        f"defaults:\n  - config\n  - _self_\nhydra:\n  searchpath:\n    - file://{user / 'extra'}\n"
        "train:\n  steps: 5\n")
    argv = ["--config-dir", str(user / "conf"), "--config-name", "myconfig"]
    (cfg,) = preflight([*argv, "experiment=other"]).jobs
    assert (cfg.train.steps, cfg.eval.every) == (5, 7)


def test_typo_in_a_reward_entry_names_the_entry_keys():
    with pytest.raises(UserError, match="reward.functions: wieght is not a key of an entry; "
                                        "valid keys are: _target_, weight, name, kwargs"):
        preflight(["reward.functions=[{_target_: a.b, wieght: 2}]"])


def test_user_options_appear_in_help(user):
    proc = _user_cli("--config-dir", "conf", "--help", cwd=user)
    assert proc.returncode == 0, proc.stderr
    options = {line.split(":")[0].strip(): line.split(":", 1)[1].split(", ")
               for line in proc.stdout.splitlines()
               if line.startswith(("dataset:", "experiment:")) and line.split(":", 1)[1].strip()}
    options = {k: {o.strip() for o in v} for k, v in options.items()}
    assert {"mydata", "arithmetic", "gsm8k"} <= options["dataset"]
    assert {"mine", "bad_target", "quick"} <= options["experiment"]


@pytest.mark.parametrize("experiment, needle", [
    ("bad_target", f"'{PACKAGE}' has no submodule or attribute 'no_such_module'"),
    ("bad_length", "returned 1 values for 3 completions"),
])
def test_bad_reward_target_exits_2_with_one_line_and_no_run(user, experiment, needle):
    proc = _user_cli("--config-dir", "conf", f"experiment={experiment}", cwd=user)
    assert proc.returncode == 2, proc.stderr
    lines = said(proc.stderr)
    assert len(lines) == 1 and needle in lines[0], proc.stderr
    assert not (user / "outputs").exists()  # no run dir, no MLflow store, no MLflow run


def test_algorithm_family_is_one_sweep():
    pre = preflight(["-m", "algo=grpo,gspo,dapo,dr_grpo", "run.dry_run=true"])
    assert pre.multirun and pre.swept == {"algo": ["grpo", "gspo", "dapo", "dr_grpo"]}
    by_name = {c.algo.name: c.algo for c in pre.jobs}
    assert sorted(by_name) == ["dapo", "dr_grpo", "grpo", "gspo"]
    assert (by_name["dapo"].loss_agg, by_name["dapo"].epsilon_high, by_name["dapo"].dynamic_sampling) \
        == ("token-mean", 0.28, True)
    assert (by_name["dr_grpo"].scale_rewards, by_name["dr_grpo"].loss_agg) \
        == ("none", "sequence-mean-token-scale")


@pytest.mark.slow
def test_user_experiment_runs_dapo_and_dr_grpo_with_its_reward_logged(user):
    """The acceptance run: user config dir + package + data, 3 steps, one sweep over DAPO and
    Dr.GRPO (both jobs in one process, so JAX starts once; log-probs asked at every step, so
    the sampler compiles one program, not one with and one without)."""
    proc = _user_cli("--config-dir", "conf", "-m", "experiment=mine", "algo=dapo,dr_grpo",
                     "rollout.logprob_gap_every=1", cwd=user, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    summaries = [json.loads(p.read_text()) for p in (user / "outputs").rglob("summary.json")
                 if p.parent.name != p.parents[1].name]
    jobs = {s["choices"]["algo"]: s for s in summaries if "choices" in s}
    assert set(jobs) == {"dapo", "dr_grpo"}
    assert all(s["status"] == "FINISHED" for s in jobs.values())
    db = sqlite3.connect(user / "outputs" / "mlflow.db")
    keys = {}
    for run_id, key in db.execute("select run_uuid, key from metrics"):
        keys.setdefault(run_id, set()).add(key)
    for s in jobs.values():
        logged = keys[s["mlflow_run_id"]]
        assert {"train/reward/says_answer", "train/reward/format_approx"} <= logged
        assert "train/reward/answer_exact" not in logged  # the user's list replaced the built-ins
    dapo = keys[jobs["dapo"]["mlflow_run_id"]]
    assert {"train/reward/overlong", "train/clip_ratio/high_mean"} <= dapo  # off-policy: mu=2
    assert "train/reward/overlong" not in keys[jobs["dr_grpo"]["mlflow_run_id"]]


@pytest.mark.parametrize("argv, warns", [
    (["algo=dr_grpo"], False),  # scale_rewards/loss_agg act with num_iterations=1
    (["-m", "algo=grpo,dr_grpo"], False),
    (["algo=gspo", "algo.num_iterations=1"], True),  # only the ratio level differs: a no-op
    (["-m", "algo=grpo,gspo", "algo.num_iterations=1"], True),
    (["-m", "algo=grpo,gspo,dapo,dr_grpo"], False),  # gspo and dapo are off-policy
])
def test_on_policy_guard_knows_which_algorithm_knobs_act(argv, warns):
    from rlexp.job import guards

    pre = preflight([*argv, "run.dry_run=true"])
    line = guards.noop_warning(pre.jobs, [a for a in argv if a != "-m"], pre.swept, pre.multirun)
    assert (line is not None) == warns, line


def test_an_algorithm_from_the_users_package(user, monkeypatch):
    """Adding an algorithm without editing rlexp: an Algorithm object by dotted path."""
    import numpy as np
    from tunix.rl import function_registry

    from rlexp.engine import algo_registry as registry

    monkeypatch.syspath_prepend(str(user / "pkg"))
    (cfg,) = preflight([f"algo.name={PACKAGE}.algos.RLOO", "run.dry_run=true"]).jobs
    settings = registry.algo_settings(cfg.algo)
    fn = function_registry.get_advantage_estimator(settings.advantage_estimator)
    # group [1, 0, 0, 0]: baselines 0 and 1/3 -> advantages 1 and -1/3
    np.testing.assert_allclose(fn(rewards=np.array([1.0, 0, 0, 0]), num_generations=4),
                               [1.0, -1 / 3, -1 / 3, -1 / 3], rtol=1e-6)
    with pytest.raises(UserError, match="not an rlexp.algo.algorithm.Algorithm"):
        preflight([f"algo.name={PACKAGE}.algos.NOT_AN_ALGORITHM", "run.dry_run=true"])
    from rlexp.algo.algorithm import algorithms

    with pytest.raises(UserError, match=f"algo.name='ppo' is invalid: valid choices are "
                                        f"{', '.join(algorithms())}, or a dotted path"):
        preflight(["algo.name=ppo", "run.dry_run=true"])


def test_a_file_given_to_a_generated_dataset_is_refused(user):
    with pytest.raises(UserError, match="dataset.path=.* is invalid: rlexp.data.loaders.arithmetic "
                                        "generates its problems"):
        preflight([f"dataset.path={user / 'data.jsonl'}", "run.dry_run=true"])
    (cfg,) = preflight(["dataset._target_=rlexp.data.loaders.generic", "dataset.question_field=problem",
                        "dataset.answer_field=solution", f"dataset.path={user / 'data.jsonl'}",
                        "run.dry_run=true"]).jobs
    assert cfg.dataset._target_ == "rlexp.data.loaders.generic"
