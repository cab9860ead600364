"""Sweeps on a real single-node SLURM cluster (.ci/slurm.sh), through submitit.

Skipped only where SLURM cannot be installed; with CI=true that is a failure (slurm_fixture).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from slurm_fixture import slurm  # noqa: F401 - the fixture
from sweep_helpers import (TINY, explain, mlflow_children, only_sweep_dir, rlexp, summaries,
                           toy_reports, write_toy_app)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm")]

# Two hardware profiles that differ in every resource the launcher maps.
HARDWARE = {
    "small": {"cpus_per_task": 1, "gpus_per_node": 0, "timeout_min": 3, "partition": None},
    "large": {"cpus_per_task": 2, "gpus_per_node": 0, "timeout_min": 7, "partition": "debug"},
}


def test_submitit_runs_a_function_on_slurm(tmp_path):
    import submitit

    executor = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="slurm")
    executor.update_parameters(timeout_min=2, cpus_per_task=1)
    t0 = time.perf_counter()
    job = executor.submit(pow, 2, 10)
    assert job.result() == 1024
    assert time.perf_counter() - t0 < 120
    assert job.state in ("COMPLETED", "RUNNING", "UNKNOWN") or job.done()
    # sacct (slurmdbd) knows the job: what submitit relies on to see a job die.
    out = subprocess.run(["sacct", "-n", "-X", "-j", str(job.job_id), "-o", "State"],
                         capture_output=True, text=True, timeout=30).stdout
    for _ in range(20):  # the controller hands the record to slurmdbd asynchronously
        if "COMPLETED" in out:
            break
        time.sleep(1)
        out = subprocess.run(["sacct", "-n", "-X", "-j", str(job.job_id), "-o", "State"],
                             capture_output=True, text=True, timeout=30).stdout
    assert "COMPLETED" in out


def test_rlexp_slurm_gives_each_job_its_own_resources(tmp_path):
    app = write_toy_app(tmp_path, HARDWARE)
    proc = subprocess.run([sys.executable, str(app), "-m", "hardware=small,large",
                           "hydra/launcher=rlexp_slurm", f"hydra.sweep.dir={tmp_path}/sweep"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, explain(proc)
    got = toy_reports(tmp_path / "sweep")
    assert got["small"]["cpus"] == "1" and got["large"]["cpus"] == "2"
    assert got["small"]["time_limit"] == "3:00" and got["large"]["time_limit"] == "7:00"
    assert got["large"]["partition"] == "debug"
    assert got["small"]["slurm_job"] != got["large"]["slurm_job"]


def test_a_launcher_value_wins_over_the_hardware_group(tmp_path):
    app = write_toy_app(tmp_path, HARDWARE)
    proc = subprocess.run([sys.executable, str(app), "-m", "hardware=small,large",
                           "hydra/launcher=rlexp_slurm", "hydra.launcher.cpus_per_task=1",
                           f"hydra.sweep.dir={tmp_path}/sweep"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, explain(proc)
    got = toy_reports(tmp_path / "sweep")
    assert got["small"]["cpus"] == got["large"]["cpus"] == "1"
    assert got["large"]["time_limit"] == "7:00"  # the other keys still per job


def test_a_preset_interpolating_hardware_is_not_per_job(tmp_path):
    """Why rlexp_slurm exists: submitit_slurm + ${hardware.cpus_per_task} is resolved once."""
    app = write_toy_app(tmp_path, HARDWARE)
    proc = subprocess.run([sys.executable, str(app), "-m", "hardware=small,large",
                           "hydra/launcher=submitit_slurm",
                           "hydra.launcher.cpus_per_task=${hardware.cpus_per_task}",
                           f"hydra.sweep.dir={tmp_path}/sweep"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, explain(proc)
    got = toy_reports(tmp_path / "sweep")
    assert got["small"]["cpus"] == got["large"]["cpus"] == "1"  # large asked for 2


def test_rlexp_sweep_on_slurm(tmp_path):
    """A real SLURM sweep against a real `mlflow server` on 127.0.0.1: one parent run, FINISHED,
    with one child per job (each job is given the store and the parent in its environment)."""
    from rlexp.tracking.ui import free_port
    from test_tracking_server import Server

    server = Server(tmp_path / "server" / "mlflow.db", free_port()).start()
    try:
        proc = rlexp(["-m", "hydra/launcher=rlexp_slurm", "train.seed=0,1", *TINY,
                      f"tracker.uri={server.url}"], tmp_path)
        assert proc.returncode == 0, explain(proc)
        sweep_dir = only_sweep_dir(tmp_path)
        runs = summaries(sweep_dir)
        assert len(runs) == 2, runs
        assert all(s["status"] == "FINISHED" for s in runs.values()), runs
        assert len(list(sweep_dir.glob(".submitit/*/*_result.pkl"))) == 2  # ran as SLURM jobs
        parent, children = mlflow_children(sweep_dir)
        assert parent["info"]["uri"] == server.url and parent["run"].info.status == "FINISHED"
        assert sorted(r.data.params["train.seed"] for r in children) == ["0", "1"]
        assert all(r.info.status == "FINISHED" for r in children)
        assert not (tmp_path / "outputs" / "mlflow.db").exists()  # nothing went to sqlite
    finally:
        server.stop()


def test_slurm_refuses_a_sqlite_store_off_the_shared_filesystem(tmp_path):
    import os
    from pathlib import Path

    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("/dev/shm is not a separate filesystem here")
    proc = rlexp(["-m", "hydra/launcher=rlexp_slurm", "train.seed=0,1", *TINY,
                  f"tracker.uri=sqlite:///{shm}/rlexp-e11-never.db"], tmp_path, timeout=120)
    assert proc.returncode == 2, explain(proc)
    assert "not on the sweep dir's filesystem" in proc.stderr and "Traceback" not in proc.stderr
    assert not (shm / "rlexp-e11-never.db").exists() and not (tmp_path / "outputs").exists()
