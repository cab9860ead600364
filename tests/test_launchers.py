"""Launchers: each `hydra/launcher=NAME` exists, runs real jobs, and isolates a failing job.

Fast: discovery and composition of every launcher option, the per-job resource rule, and how
Hydra's basic and joblib launchers propagate a job's exception (a toy app, seconds).
Slow (real `python -m rlexp` training, JAX compiles): submitit_local, a failing job under
joblib plus the rerun that repeats only it (a joblib 2 x 2 sweep under one MLflow parent:
tests/test_sweeps.py; Ray: tests/test_ray.py; SLURM: tests/test_slurm.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from hydra import compose
from omegaconf import OmegaConf

from sweep_helpers import (TINY, explain, fault_env, mlflow_children, only_sweep_dir, rlexp,
                           summaries, write_toy_app)
from rlexp.base.runtime import environment  # os.environ copied safely from other threads

LAUNCHERS = {
    "basic": "hydra._internal.core_plugins.basic_launcher.BasicLauncher",
    "joblib": "hydra_plugins.rlexp_presets.joblib_launcher.RlexpJoblibLauncher",
    "submitit_local": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.LocalLauncher",
    "submitit_slurm": "hydra_plugins.hydra_submitit_launcher.submitit_launcher.SlurmLauncher",
    "rlexp_slurm": "hydra_plugins.rlexp_slurm_launcher.slurm_launcher.RlexpSlurmLauncher",
    "rlexp_local": "hydra_plugins.rlexp_slurm_launcher.slurm_launcher.RlexpLocalLauncher",
    "xpk": "hydra_plugins.rlexp_xpk_launcher.xpk_launcher.XpkLauncher",
    "rlexp_ray": "hydra_plugins.rlexp_ray_launcher.ray_launcher.RlexpRayLauncher",
}


# ------------------------------------------------------------------------------------ fast


@pytest.mark.parametrize("name", sorted(LAUNCHERS))
def test_launcher_option_composes_and_its_class_is_a_hydra_launcher(name, hydra_conf):
    import importlib

    from hydra.plugins.launcher import Launcher

    cfg = compose("config", overrides=[f"hydra/launcher={name}"], return_hydra_config=True)
    target = cfg.hydra.launcher._target_
    assert target == LAUNCHERS[name]
    module, cls = target.rsplit(".", 1)
    assert issubclass(getattr(importlib.import_module(module), cls), Launcher)


def test_joblib_runs_two_jobs_at_a_time(hydra_conf):
    cfg = compose("config", overrides=["hydra/launcher=joblib"], return_hydra_config=True)
    assert cfg.hydra.launcher.n_jobs == 2  # this machine has 2 cores


def test_launcher_plugins_are_discovered_by_hydra():
    from hydra.core.plugins import Plugins
    from hydra.plugins.launcher import Launcher

    found = {p.__name__ for p in Plugins.instance().discover(Launcher)}
    assert {"XpkLauncher", "RlexpSlurmLauncher", "RlexpLocalLauncher", "RlexpRayLauncher"} <= found


def test_a_slurm_time_limit_within_submitits_signal_is_refused(hydra_conf, compose_config):
    """SLURM may send --signal=USR2@<signal_delay_s> 60 s early: a limit <= delay + 60 s can be
    signalled at the job's start. The limit is the launcher's timeout_min, else the job's."""
    from rlexp.base.errors import UserError
    from rlexp.launch.checks import CheckContext, check_slurm_time, slurm_limits

    def limits(*overrides: str):
        return slurm_limits(compose("config", overrides=list(overrides), return_hydra_config=True))

    assert limits("hydra/launcher=rlexp_slurm") == (None, 120)  # hydra-submitit's default delay
    assert limits("hydra/launcher=submitit_slurm") == (60, 120)
    assert limits("hydra/launcher=rlexp_slurm", "hydra.launcher.timeout_min=9",
                  "hydra.launcher.signal_delay_s=30") == (9, 30)
    assert limits("hydra/launcher=joblib") is None and limits() is None

    def check(minutes: int, slurm) -> None:
        check_slurm_time(compose_config(f"hardware.timeout_min={minutes}"), CheckContext(slurm=slurm))

    check(4, (None, 120))  # 240 s > 120 + 60
    check(2, (None, 30))  # 120 s > 30 + 60
    check(1, None)  # not SLURM
    with pytest.raises(UserError) as refused:
        check(3, (None, 120))  # 180 s: the signal may come at 0 s
    assert str(refused.value).startswith("hardware.timeout_min=3 is too short for SLURM")
    assert "signal_delay_s=120" in str(refused.value)
    assert "set hardware.timeout_min >= 4 or a smaller hydra.launcher.signal_delay_s" \
        in str(refused.value)
    with pytest.raises(UserError, match=r"^hydra.launcher.timeout_min=2 .* >= 4 "):
        check(60, (2, 120))  # the launcher's value wins over the job's


def test_per_job_resources_come_from_hardware_unless_the_launcher_sets_them():
    from hydra_plugins.rlexp_slurm_launcher.slurm_launcher import job_resources

    job = OmegaConf.create({"hardware": {"cpus_per_task": 8, "gpus_per_node": 1,
                                         "timeout_min": 90, "partition": "gpu"}})
    keys = ("cpus_per_task", "gpus_per_node", "timeout_min", "partition")
    assert job_resources({}, job, keys) == {"cpus_per_task": 8, "gpus_per_node": 1,
                                            "timeout_min": 90, "partition": "gpu"}
    got = job_resources({"cpus_per_task": 2, "partition": None}, job, keys)
    assert got["cpus_per_task"] == 2 and got["partition"] == "gpu"
    cpu = OmegaConf.create({"hardware": {"cpus_per_task": 2, "gpus_per_node": 0,
                                         "timeout_min": 60, "partition": None}})
    assert job_resources({}, cpu, keys)["gpus_per_node"] is None  # never --gpus-per-node=0


@pytest.mark.parametrize("hw,want", [
    ({"hosts": 1, "runtime": "single", "platform": "cpu"}, (1, 1)),
    ({"hosts": 2, "runtime": "multi_controller", "platform": "cpu"}, (1, 2)),  # cpu-2host
    ({"hosts": 2, "runtime": "multi_controller", "platform": "gpu"}, (2, 1)),  # gpu-2node
    ({"hosts": 2, "runtime": "multi_controller", "platform": "gpu", "emulate": True}, (1, 1)),
    ({"hosts": 8, "runtime": "pathways", "platform": "tpu"}, (1, 1)),  # one controller
])
def test_slurm_nodes_and_tasks_come_from_the_jobs_processes(hw, want):
    from hydra_plugins.rlexp_slurm_launcher.slurm_launcher import job_layout

    job = OmegaConf.create({"hardware": hw})
    got = job_layout({}, job)
    assert (got["nodes"], got["tasks_per_node"]) == want
    assert job_layout({"nodes": 3, "tasks_per_node": None}, job)["nodes"] == 3  # launcher wins


@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_a_job_exception_does_not_stop_the_other_jobs(launcher, tmp_path):
    """What rlexp relies on: Hydra runs every job of the batch, then re-raises the first error.

    A job that exits the process (sys.exit) is different: it ends the whole sweep, so rlexp's
    jobs must raise, never exit, inside a multirun.
    """
    app = write_toy_app(tmp_path, {"a": {"fail": "false"}, "b": {"fail": "true"},
                                   "c": {"fail": "false"}})
    args = [sys.executable, str(app), "-m", "hardware=a,b,c", f"hydra/launcher={launcher}",
            f"hydra.sweep.dir={tmp_path}/sweep", "fail=${hardware.fail}"]
    env = {**environment(), "HYDRA_FULL_ERROR": "0"}
    proc = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 1, explain(proc)
    assert "job b asked to fail" in proc.stderr
    reports = sorted(p.parent.name for p in (tmp_path / "sweep").glob("*/report.json"))
    assert len(reports) == 3  # a and c ran to the end although b raised


# ------------------------------------------------------------------------------------ slow


@pytest.mark.slow
def test_submitit_local_runs_the_jobs(tmp_path):
    # untracked: the claim is the executor's (the other launcher tests read MLflow's runs)
    proc = rlexp(["-m", "hydra/launcher=submitit_local", "train.seed=0,1", *TINY,
                  "tracker=none"], tmp_path)
    assert proc.returncode == 0, explain(proc)
    sweep_dir = only_sweep_dir(tmp_path)
    runs = summaries(sweep_dir)
    assert len(runs) == 2 and all(s["status"] == "FINISHED" for s in runs.values()), runs
    # Each job ran in a submitit worker process, not in the launching one.
    assert len(list(sweep_dir.glob(".submitit/*/*_result.pkl"))) == 2


@pytest.mark.slow
def test_a_failing_job_is_isolated_and_the_rerun_repeats_only_it(tmp_path):
    """Job train.seed=1 crashes inside training (an injected RuntimeError); job 0 finishes.
    Both end in the summaries and MLflow, the failure with its error line. The same command
    again (the crash gone) skips job 0 and runs job 1 to the end."""
    args = ["-m", "hydra/launcher=joblib", "train.seed=0,1", *TINY]
    first = rlexp(args, tmp_path, env=fault_env(tmp_path, seed=1))
    sweep_dir = only_sweep_dir(tmp_path)
    runs = {_seed_of(s): s for s in summaries(sweep_dir).values()}
    assert set(runs) == {"0", "1"}, (runs, explain(first))
    assert runs["0"]["status"] == "FINISHED", explain(first)
    assert runs["1"]["status"] == "FAILED"
    assert runs["1"]["error"] == "RuntimeError: injected failure (train.seed=1)"
    assert first.returncode != 0  # the sweep says that a job failed
    parent, children = mlflow_children(sweep_dir)
    statuses = {r.data.params["train.seed"]: r.info.status for r in children}
    assert statuses == {"0": "FINISHED", "1": "FAILED"}
    assert parent["run"].info.status == "FAILED"
    finished_before = (Path(runs["0"]["run_dir"]) / "summary.json").read_text()

    second = rlexp(args, tmp_path)  # same command, no injected failure
    assert second.returncode == 0, explain(second)
    assert only_sweep_dir(tmp_path) == sweep_dir  # same command, same sweep dir
    runs = {_seed_of(s): s for s in summaries(sweep_dir).values()}
    assert {k: s["status"] for k, s in runs.items()} == {"0": "FINISHED", "1": "FINISHED"}
    # Job 0 was not run again: its summary is byte for byte the same.
    assert (Path(runs["0"]["run_dir"]) / "summary.json").read_text() == finished_before
    assert "already finished" in second.stdout + second.stderr
    parent, children = mlflow_children(sweep_dir)
    assert sorted(r.data.params["train.seed"] for r in children if r.info.status == "FINISHED") \
        == ["0", "1"]


def _seed_of(summary: dict) -> str:
    return next(o.split("=", 1)[1] for o in summary["overrides"] if o.startswith("train.seed="))


# ------------------------------------------------- remote jobs: tracking store and parent


@pytest.mark.parametrize("target,kind", [
    (LAUNCHERS["xpk"], "xpk"), (LAUNCHERS["rlexp_slurm"], "slurm"),
    (LAUNCHERS["submitit_slurm"], "slurm"), (LAUNCHERS["rlexp_ray"], "ray"),
    (LAUNCHERS["rlexp_local"], "local"), (LAUNCHERS["submitit_local"], "local"),
    (LAUNCHERS["joblib"], "local"), (LAUNCHERS["basic"], "local"), (None, "local"),
])
def test_launcher_kind(target, kind):
    from rlexp.tracking.remote_jobs import launcher_kind

    assert launcher_kind(target) == kind


def test_xpk_refuses_a_store_on_this_machine(tmp_path):
    from rlexp.base.errors import UserError
    from rlexp.tracking.remote_jobs import check_store

    for uri in (f"sqlite:///{tmp_path}/mlflow.db", f"file://{tmp_path}/mlruns"):
        with pytest.raises(UserError) as err:
            check_store("xpk", uri, tmp_path / "sweep", "xpk")
        assert "tracker.uri=http://" in str(err.value) and "\n" not in str(err.value)
    check_store("xpk", "http://mlflow.internal:5000", tmp_path / "sweep", "xpk")
    check_store("xpk", None, tmp_path / "sweep", "xpk")  # tracker=none


def test_slurm_takes_sqlite_only_on_the_sweep_dirs_filesystem(tmp_path):
    from rlexp.base.errors import UserError
    from rlexp.tracking.remote_jobs import check_store

    sweep = tmp_path / "outputs" / "sweeps" / "s"
    check_store("slurm", f"sqlite:///{tmp_path}/outputs/mlflow.db", sweep)  # same filesystem
    check_store("local", "sqlite:////anywhere/mlflow.db", sweep)
    other = Path("/dev/shm")
    if not other.is_dir() or os.stat(other).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second filesystem to put a store on")
    with pytest.raises(UserError, match="hydra/launcher=rlexp_slurm: .* not on the sweep dir"):
        check_store("slurm", f"sqlite:///{other}/rlexp-test.db", sweep, "rlexp_slurm")


def test_job_env_comes_from_the_parent_file(tmp_path):
    from rlexp.tracking.remote_jobs import ENV_JOBS, ENV_PARENT, ENV_URI, job_env

    assert job_env(tmp_path, 3) == {}  # tracking off: no parent, nothing passed
    (tmp_path / "parent_run.json").write_text(json.dumps(
        {"run_id": "abc", "uri": "http://h:5000", "experiment_id": "1"}))
    assert job_env(tmp_path, 3) == {ENV_URI: "http://h:5000", ENV_PARENT: "abc", ENV_JOBS: "3"}


def test_a_remote_job_finds_its_parent_in_the_environment(tmp_path, monkeypatch):
    from rlexp.job.experiment import JobContext
    from rlexp.job.listeners import parent

    job = JobContext(run_dir=tmp_path / "run", name="run", choices={}, overrides=[])
    monkeypatch.delenv("RLEXP_PARENT_RUN_ID", raising=False)
    assert parent(job) == {}
    monkeypatch.setenv("RLEXP_PARENT_RUN_ID", "p123")
    assert parent(job) == {"parent_run_id": "p123"}
    sweep = tmp_path / "sweep"
    sweep.mkdir()
    (sweep / "parent_run.json").write_text(json.dumps({"run_id": "local", "uri": "x"}))
    job.sweep_dir = sweep  # a job of a local multirun: the sweep dir's parent wins
    assert parent(job) == {"parent_run_id": "local"}


def test_the_last_remote_child_closes_the_parent(tmp_path):
    """xpk: the launching process returns at once; the parent stays RUNNING until the
    expected number of children has ended, then gets its table and final status."""
    from mlflow import MlflowClient

    from rlexp.tracking.callback import close_if_complete

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    client = MlflowClient(uri)
    exp = client.create_experiment("remote", artifact_location=str(tmp_path / "artifacts"))
    parent = client.create_run(exp, run_name="sweep").info.run_id
    kids = [client.create_run(exp, run_name=f"job{i}", tags={"mlflow.parentRunId": parent})
            .info.run_id for i in range(2)]
    client.set_terminated(kids[0], "FINISHED")
    assert close_if_complete(uri, parent, 2) is None
    assert client.get_run(parent).info.status == "RUNNING"
    client.set_terminated(kids[1], "FAILED")
    assert close_if_complete(uri, parent, 2) == "FAILED"
    assert client.get_run(parent).info.status == "FAILED"
    assert {a.path for a in client.list_artifacts(parent)} >= {"summary.csv", "summary.md"}
