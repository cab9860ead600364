"""Sweeps on a real single-node SLURM cluster (.ci/slurm.sh), through submitit.

Skipped only where SLURM cannot be installed; with CI=true that is a failure (slurm_fixture).
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from helpers import cli_env, one_line_exit_2
from slurm_fixture import slurm  # noqa: F401 - the fixture
from sweep_helpers import (TINY, TWO_HOST, explain, finished_sweep, mlflow_children,
                           only_sweep_dir, rlexp, summaries, toy_reports, write_toy_app)

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("slurm")]

# Two hardware profiles that differ in every resource the launcher maps.
HARDWARE = {
    "small": {"cpus_per_task": 1, "gpus_per_node": 0, "timeout_min": 4, "partition": None},
    "large": {"cpus_per_task": 2, "gpus_per_node": 0, "timeout_min": 7, "partition": "debug"},
}


def test_submitit_runs_a_function_on_slurm(tmp_path):
    import submitit

    executor = submitit.AutoExecutor(folder=tmp_path / "submitit", cluster="slurm")
    # 4 min: submitit's USR2@90 may come 60 s early (sbatch --signal); at 2 min it came at the
    # job's start once, and the job ended FAILED (launch.checks.check_slurm_time).
    executor.update_parameters(timeout_min=4, cpus_per_task=1)
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
    assert got["small"]["time_limit"] == "4:00" and got["large"]["time_limit"] == "7:00"
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


def test_a_job_time_limit_within_submitits_signal_is_refused_before_any_job(tmp_path):
    proc = rlexp(["-m", "hydra/launcher=rlexp_slurm", "train.seed=0,1", *TINY,
                  "hardware.timeout_min=3"], tmp_path, timeout=120)
    one_line_exit_2(proc, "hardware.timeout_min=3 is too short for SLURM",
                    "set hardware.timeout_min >= 4")
    assert not (tmp_path / "outputs").exists()  # no sweep dir, no MLflow parent, no job


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


# ------------------------------------------------------ multi-process jobs (srun's tasks)

def test_srun_is_found_and_a_process_count_it_does_not_fit_exits_2_in_its_line(tmp_path):
    """`srun -n 2 python -m rlexp hardware=cpu-2host hardware.hosts=3`: each process reads
    srun's count from SLURM's environment and refuses with exit 2, no traceback, nothing
    written. SLURM's default (KillOnBadExit=0; .ci/slurm.sh leaves it) lets process 1 finish
    after process 0 has exited, so it says the same line after its delay (README: srun -K1
    ends the others at once)."""
    proc = subprocess.run(["srun", "-n", "2", sys.executable, "-m", "rlexp", "hardware=cpu-2host",
                           "hardware.hosts=3"], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=180)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 2, out[-3000:]
    errors = [ln for ln in out.splitlines() if ln.startswith("rlexp: error:")]
    assert len(errors) == 2 and errors[0] == errors[1], errors
    assert "runs 3 processes (hardware.hosts=3) but srun started 2: start 3" in errors[0]
    assert "task 0: Exited with exit code 2" in out and "task 1: Exited with exit code 2" in out
    assert out.count("rlexp: starting a run") == 1, out  # process 0 only
    assert "Traceback" not in out and not (tmp_path / "outputs").exists()


LAYOUT_APP = '''
import json, os
from pathlib import Path

import hydra


@hydra.main(config_path="conf", config_name="config", version_base="1.3")
def main(cfg):
    from hydra.core.hydra_config import HydraConfig

    keys = ("SLURM_JOB_ID", "SLURM_PROCID", "SLURM_NTASKS", "SLURM_STEP_NUM_TASKS",
            "SLURM_JOB_NUM_NODES", "SLURM_NTASKS_PER_NODE")
    out = {"hardware": cfg.hardware.name, **{k: os.environ.get(k) for k in keys}}
    name = f"task-{os.environ.get('SLURM_PROCID')}.json"
    Path(HydraConfig.get().runtime.output_dir, name).write_text(json.dumps(out))
    return 1.0


if __name__ == "__main__":
    main()
'''

# One plain process, and two processes (multi_controller) on this one CPU node: 2 x 1 CPU.
LAYOUTS = {
    "one": {"platform": "cpu", "hosts": 1, "runtime": "single", "emulate": "false",
            "cpus_per_task": 1, "gpus_per_node": 0, "timeout_min": 4, "partition": None},
    "two": {"platform": "cpu", "hosts": 2, "runtime": "multi_controller", "emulate": "false",
            "cpus_per_task": 1, "gpus_per_node": 0, "timeout_min": 4, "partition": None},
}


def test_a_multi_controller_job_is_one_slurm_job_of_one_task_per_host(tmp_path):
    """hardware.hosts=2 under multi_controller: the job's sbatch script asks for 2 tasks on
    1 node, srun starts both, and each runs the job with SLURM's view of the other."""
    import json
    import re

    app = write_toy_app(tmp_path, LAYOUTS)
    app.write_text(LAYOUT_APP)
    proc = subprocess.run([sys.executable, str(app), "-m", "hardware=one,two",
                           "hydra/launcher=rlexp_slurm", f"hydra.sweep.dir={tmp_path}/sweep"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, explain(proc)
    scripts = {p.read_text() for p in (tmp_path / "sweep").glob(".submitit/*/*_submission.sh")}
    tasks = sorted(int(re.search(r"--ntasks-per-node=(\d+)", s).group(1)) for s in scripts)
    nodes = sorted(int(re.search(r"--nodes=(\d+)", s).group(1)) for s in scripts)
    assert tasks == [1, 2] and nodes == [1, 1], scripts
    reports = [json.loads(p.read_text()) for p in (tmp_path / "sweep").glob("*/task-*.json")]
    by_hw = {}
    for r in reports:
        by_hw.setdefault(r["hardware"], []).append(r)
    assert [r["SLURM_PROCID"] for r in by_hw["one"]] == ["0"]
    assert sorted(r["SLURM_PROCID"] for r in by_hw["two"]) == ["0", "1"]  # two processes...
    assert {r["SLURM_JOB_ID"] for r in by_hw["two"]} != {by_hw["one"][0]["SLURM_JOB_ID"]}
    assert len({r["SLURM_JOB_ID"] for r in by_hw["two"]}) == 1  # ...of one SLURM job
    assert all(r["SLURM_STEP_NUM_TASKS"] == "2" for r in by_hw["two"]), by_hw["two"]


def test_a_two_process_sweep_on_slurm_is_one_child_run_per_job(tmp_path):
    """Acceptance: a sweep job of hardware=cpu-2host (2 processes: srun's 2 tasks x 1 CPU on
    this 2-CPU node, joined by jax.distributed) through rlexp_slurm: one SLURM job, one
    finished child under the parent (not one per process), one summary. One job: a second
    would queue behind the first on this one node and prove nothing more (the jobs of a sweep
    each becoming a child is test_rlexp_sweep_on_slurm's); the job is test_ray's, so the
    session compiles its programs once."""
    import re

    t0 = time.perf_counter()
    proc = rlexp(["-m", "hydra/launcher=rlexp_slurm", *TWO_HOST], tmp_path)
    assert proc.returncode == 0, explain(proc)
    sweep_dir = only_sweep_dir(tmp_path)
    scripts = [p.read_text() for p in sweep_dir.glob(".submitit/*/*_submission.sh")]
    assert len(scripts) == 1 and re.search(r"--ntasks-per-node=2\b", scripts[0]) and \
        re.search(r"--nodes=1\b", scripts[0]), scripts
    assert finished_sweep(sweep_dir, lambda r: r.data.params["hardware.name"]) == ["cpu-2host"]
    assert len(summaries(sweep_dir)) == 1
    print(f"slurm 1 job x 2 processes: {time.perf_counter() - t0:.1f} s")
