"""Multi-controller runs with real processes: `mpirun -n 2 python -m rlexp hardware=cpu-2host`
(two processes x two virtual CPU devices, joined by jax.distributed, gloo collectives) against
the same 4-device mesh in one process (hardware.emulate=true); a process SIGKILLed mid-run and
the rerun; the launches that are refused. Nothing here stands in for jax.distributed.

The fast tests check the pure parts (which launcher started a process, the refusals, the
plan's process lines, the lost-process line, the per-process lock); the slow ones start
processes (one compile each, the tiny model, the session's shared run cache).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import require
from helpers import cli, cli_env, one_line_exit_2
from rlexp.tracking.ui import free_port
from rlexp.base import runtime
from rlexp.base.errors import UserError
from rlexp.base.lock import Busy, DirLock, is_lock_file
from rlexp.planning import hardware

# ------------------------------------------------------------------------------ fast: pure


@pytest.fixture()
def profile(compose_config):
    return lambda name, *extra: compose_config(f"hardware={name}", *extra).hardware


@pytest.mark.parametrize("env,want", [
    ({}, hardware.Launch()),
    ({"OMPI_COMM_WORLD_SIZE": "2", "OMPI_COMM_WORLD_RANK": "1"}, hardware.Launch("mpirun", 2, 1)),
    ({"SLURM_JOB_ID": "7", "SLURM_STEP_NUM_TASKS": "4", "SLURM_PROCID": "3"},
     hardware.Launch("srun", 4, 3)),
    # an sbatch script itself (no job step) is one process, whatever the allocation
    ({"SLURM_JOB_ID": "7", "SLURM_NTASKS": "4", "SLURM_PROCID": "0"}, hardware.Launch()),
    ({"TPU_WORKER_HOSTNAMES": "a,b,c,d", "TPU_WORKER_ID": "2"}, hardware.Launch("Cloud TPU", 4, 2)),
    ({"JAX_COORDINATOR_ADDRESS": "h:1234", "JAX_NUM_PROCESSES": "2", "JAX_PROCESS_ID": "0",
      "OMPI_COMM_WORLD_SIZE": "8"}, hardware.Launch("JAX_COORDINATOR_ADDRESS", 2, 0)),
])
def test_detect_launch(env, want):
    assert hardware.detect_launch(env) == want


def test_cpu_2host_gives_each_process_its_share_of_devices_and_gloo(profile):
    two = profile("cpu-2host")
    assert (two.devices, two.hosts, two.runtime) == (4, 2, "multi_controller")
    env = hardware.platform_env(two, {})
    assert env["XLA_FLAGS"] == "--xla_force_host_platform_device_count=2"
    assert env["JAX_CPU_COLLECTIVES_IMPLEMENTATION"] == "gloo"
    emulated = hardware.platform_env(profile("cpu-2host", "hardware.emulate=true"), {})
    assert emulated["XLA_FLAGS"] == "--xla_force_host_platform_device_count=4"
    assert "JAX_CPU_COLLECTIVES_IMPLEMENTATION" not in emulated
    gpu = profile("gpu-2node")
    assert (gpu.devices, gpu.hosts, gpu.gpus_per_node, gpu.runtime) == (16, 2, 8,
                                                                       "multi_controller")
    assert hardware.local_devices(gpu) == 8


def test_launches_that_do_not_fit_the_runtime_are_one_line(profile):
    two = profile("cpu-2host")
    with pytest.raises(UserError, match=r"one plain process: start it with `mpirun -n 2 "):
        hardware.check_launch(two, hardware.Launch())
    with pytest.raises(UserError, match=r"runs 2 processes \(hardware.hosts=2\) but mpirun "
                                        r"started 3"):
        hardware.check_launch(two, hardware.Launch("mpirun", 3, 0))
    with pytest.raises(UserError, match="JAX_NUM_PROCESSES"):
        hardware.check_launch(two, hardware.Launch("JAX_COORDINATOR_ADDRESS", None, None))
    with pytest.raises(UserError, match=r"hardware.runtime=pathways"):
        hardware.check_launch(profile("v5p-64", "hardware.runtime=multi_controller"),
                              hardware.Launch("Cloud TPU", 8, 0))
    with pytest.raises(UserError, match=r"mpirun started 2 processes but hardware=cpu runs one"):
        hardware.check_launch(profile("cpu"), hardware.Launch("mpirun", 2, 0))
    hardware.check_launch(two, hardware.Launch("mpirun", 2, 1))  # fits
    hardware.check_launch(profile("cpu-2host", "hardware.emulate=true"), hardware.Launch())


def test_plan_lines_show_the_process_layout(profile):
    assert hardware.process_lines(profile("cpu-2host")) == [
        "processes  2 (one per host, hardware.runtime=multi_controller) x 2 cpu device(s) "
        "each; process 0 logs and writes", "host RAM   12 GiB per host"]
    assert hardware.process_lines(profile("cpu"))[0] == "processes  1 x 1 cpu device(s)"


def test_the_lost_process_is_read_from_jax_distributed_lines():
    unhealthy = (b"E1124 11:16:34.253250   15169 coordination_service.cc:1549] [1] Use error "
                 b"polling to propagate the following error to all tasks: UNAVAILABLE: The "
                 b"following tasks are unhealthy (stopped sending heartbeats):\n1\nThe tasks "
                 b"have crashed.\n")
    assert runtime.lost_processes(unhealthy) == "1"
    leader = (b"F1124 11:17:35.260870   17747 client.h:80] Terminating process because ... "
              b"UNAVAILABLE: Failed to send RPC to coordination service. Either the leader "
              b"task was preempted/died/restarted unexpectedly\n")
    assert runtime.lost_processes(leader) == "0"
    assert runtime.lost_processes(b"F1124 11:17:35.260870 1 x.cc:1] Check failed: x\n") is None


def test_lost_peer_names_the_other_of_two(monkeypatch):
    err = RuntimeError("INTERNAL: Gloo all-reduce failed: Read error: Connection reset by peer")
    assert hardware.lost_peer(err) is None  # one process: never a lost peer
    monkeypatch.setattr(runtime, "_process", (0, 2))
    assert hardware.lost_peer(err).startswith("process 1 of 2 was lost")
    assert hardware.lost_peer(ValueError("a bug")) is None


def test_each_process_of_a_run_locks_its_own_file_and_a_second_launch_is_refused(tmp_path):
    first = [DirLock(tmp_path, process=i).acquire() for i in (0, 1)]  # one run, two processes
    assert sorted(p.name for p in tmp_path.iterdir()) == ["rlexp.1.lock", "rlexp.lock"]
    assert all(is_lock_file(p.name) for p in tmp_path.iterdir())
    for i in (0, 1):  # the same command again: every process is refused
        with pytest.raises(Busy, match="in use by pid"):
            DirLock(tmp_path, process=i).acquire()
    for lock in first:
        lock.release()

# ------------------------------------------------------------------- slow: real processes

MPIRUN = shutil.which("mpirun")
STEPS = 4
# Cheap runs: 4 steps (process 1 is killed once step 3 is done, after step 2's checkpoint;
# the rerun resumes there and trains 3 and 4); the tiny model after 100 warm-start steps
# instead of the recipe's 300 (enough for formatted answers: rewards that vary within a
# group, reward_std 0.3-0.55; the 300 took 28-30 s of the emulated run on a busy 2-core CPU;
# the two-process runs load it from the cache); 8 prompts a step (2 per device of the
# 4-device mesh) instead of 32; a small greedy + pass@1 evaluation before and after only; a
# checkpoint every 2 steps. dataset.num_eval=8 (8 are evaluated anyway): the warm start's
# inputs are then those of test_sweeps' seed sweep and test_export (seed 0), so the session
# trains that warm start once for the three.
ARGS = ("hardware=cpu-2host", f"train.steps={STEPS}", "model.warm_start_steps=100",
        "train.batch_size=8", "eval.every=0", "train.checkpoint_every=2", "eval.num_samples=8",
        "dataset.num_eval=8", "eval.pass_k=1")


def _mpirun(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    require(MPIRUN is not None, "Open MPI's mpirun is not installed", "bash scripts/setup --test")
    return subprocess.run([MPIRUN, "--allow-run-as-root", "--oversubscribe", "--tag-output",
                           "-n", "2",
                           sys.executable, "-m", "rlexp", *args], cwd=cwd, env=cli_env(),
                          capture_output=True, text=True, timeout=timeout)


def _history(cwd: Path, run_dir: Path) -> dict[str, list[tuple[int, float]]]:
    """Every metric of the run's MLflow run: name -> [(step, value)] in logged order."""
    from mlflow.tracking import MlflowClient

    run_id = json.loads((run_dir / "tracking.json").read_text())["run_id"]
    client = MlflowClient(f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")
    run = client.get_run(run_id)
    assert run.info.status == "FINISHED"
    return {name: [(m.step, m.value) for m in client.get_metric_history(run_id, name)]
            for name in run.data.metrics}


def _train_steps(history: dict) -> dict[str, list[tuple[int, float]]]:
    return {k: v for k, v in history.items() if k.startswith("train/")}


def _start_two(cwd: Path, port: int) -> list[subprocess.Popen]:
    """The explicit route: JAX_COORDINATOR_ADDRESS + JAX_NUM_PROCESSES + JAX_PROCESS_ID."""
    procs = []
    for i in (0, 1):
        env = cli_env({"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{port}", "JAX_NUM_PROCESSES": "2",
                       "JAX_PROCESS_ID": str(i)})
        procs.append(subprocess.Popen([sys.executable, "-m", "rlexp", *ARGS], cwd=cwd, env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    return procs


def _kill_process_1_mid_run(cwd: Path) -> Path:
    """Start two processes (the explicit route), SIGKILL process 1 once step 3 is done, check
    that process 0 stops by itself with one line naming the lost process; the run dir."""
    procs = _start_two(cwd, free_port())
    progress = None
    deadline = time.monotonic() + 480
    while time.monotonic() < deadline and procs[0].poll() is None:
        found = list(cwd.glob("outputs/runs/*/progress.json"))
        try:
            if found and json.loads(found[0].read_text())["step"] >= 3:
                progress = found[0]
                break
        except (OSError, ValueError):
            pass
        time.sleep(0.5)
    assert progress is not None, procs[0].communicate()[1][-3000:]
    procs[1].send_signal(signal.SIGKILL)  # its training child dies with it (PR_SET_PDEATHSIG)
    killed = time.monotonic()
    out, err = procs[0].communicate(timeout=90)
    assert time.monotonic() - killed < 60
    assert procs[0].returncode not in (0, None)
    # once: not by both its console and its exit, nor by both the job and its supervisor
    errors = [ln for ln in (out + err).splitlines() if ln.startswith("rlexp: error:")]
    assert len(errors) == 1 and "process 1 of 2 was lost" in errors[0], err[-3000:]
    assert "Check failure stack trace" not in err and "Traceback" not in err
    procs[1].communicate(timeout=30)
    return progress.parent


@pytest.mark.slow
def test_a_lost_process_then_an_mpirun_rerun_make_one_run_equal_to_the_emulated_mesh(tmp_path):
    """One two-process run serves both claims (one 2-process run fewer than testing them
    apart): a process lost mid-run ends the other, and the rerun, started by mpirun this
    time, resumes the same run to one record that equals the 4-device mesh in one process,
    losing and repeating no step."""
    emulated_dir, two_dir = tmp_path / "one", tmp_path / "two"
    emulated_dir.mkdir()
    two_dir.mkdir()
    one = cli(*ARGS, "hardware.emulate=true", cwd=emulated_dir, timeout=600)
    assert one.returncode == 0, one.stderr[-3000:]
    run_dir = _kill_process_1_mid_run(two_dir)

    two = _mpirun(*ARGS, cwd=two_dir)
    assert two.returncode == 0, two.stdout[-2000:] + two.stderr[-3000:]
    runs = list((two_dir / "outputs" / "runs").iterdir())
    assert runs == [run_dir]  # one run dir, one summary, one MLflow run
    summaries = list((two_dir / "outputs" / "runs").rglob("summary.json"))
    assert summaries == [run_dir / "summary.json"]
    summary = json.loads(summaries[0].read_text())
    assert summary["status"] == "FINISHED" and summary["resumed_from_step"] >= 2
    assert sorted(p.name for p in run_dir.glob("rlexp*.lock")) == ["rlexp.1.lock", "rlexp.lock"]
    # process 0 alone prints the run (mpirun --tag-output: "[job,rank]<stderr>:" per line)
    rank1 = [ln for ln in (two.stdout + two.stderr).splitlines() if ",1]<std" in ln]
    rank0 = [ln for ln in (two.stdout + two.stderr).splitlines() if ",0]<std" in ln]
    assert any(run_dir.name in ln for ln in rank0)
    assert not any(run_dir.name in ln for ln in rank1), rank1
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{two_dir / 'outputs' / 'mlflow.db'}")
    assert len(client.search_runs([client.get_experiment_by_name("rlexp").experiment_id])) == 1

    history = _history(two_dir, run_dir)
    got = _train_steps(history)
    assert "train/loss" in got and "train/reward_mean" in got
    for name, points in got.items():  # every metric: each of the 4 steps exactly once
        assert [s for s, _ in points] == list(range(1, STEPS + 1)), name
    want = _train_steps(_history(emulated_dir, next((emulated_dir / "outputs" / "runs").iterdir())))
    for name in ("train/loss", "train/reward_mean"):
        np.testing.assert_allclose([v for _, v in got[name]], [v for _, v in want[name]],
                                   rtol=1e-4, atol=1e-6, err_msg=name)
    # The sampler's log-probs reach the loss as the trainer's rows, not one copy per process:
    # a (2B, T) array would still give the same loss (Tunix slices B rows), but not this gap.
    for gap in ("rollout/logprob_diff", "rollout/logprob_diff_max"):
        assert history[gap] and all(v < 1e-4 for _, v in history[gap]), (gap, history.get(gap))


@pytest.mark.slow
def test_launches_that_cannot_run_exit_2_in_one_line_and_write_nothing(tmp_path):
    # cpu-2host as one plain process: the line says how to start it
    one_line_exit_2(cli("hardware=cpu-2host", cwd=tmp_path),
                    "mpirun -n 2 python -m rlexp hardware=cpu-2host", "hardware.emulate=true")
    # a process count that does not match the profile
    wrong = {"JAX_COORDINATOR_ADDRESS": "127.0.0.1:1", "JAX_NUM_PROCESSES": "3",
             "JAX_PROCESS_ID": "0"}
    one_line_exit_2(cli("hardware=cpu-2host", cwd=tmp_path, env=wrong),
                    "runs 2 processes (hardware.hosts=2) but JAX_COORDINATOR_ADDRESS started 3")
    # a coordinator nobody serves: process 1 gives up after hardware.join_timeout_s
    absent = {"JAX_COORDINATOR_ADDRESS": f"127.0.0.1:{free_port()}", "JAX_NUM_PROCESSES": "2",
              "JAX_PROCESS_ID": "1"}
    started = time.monotonic()
    one_line_exit_2(cli("hardware=cpu-2host", "hardware.join_timeout_s=2", cwd=tmp_path,
                        env=absent, timeout=120),
                    "process 1 of 2 could not join the coordinator", "join_timeout_s=2")
    assert time.monotonic() - started < 60
    assert sorted(os.listdir(tmp_path)) in ([], ["outputs"])
    assert not any(p.is_file() for p in (tmp_path / "outputs").rglob("*")) \
        if (tmp_path / "outputs").exists() else True


@pytest.mark.slow
def test_a_process_count_mpirun_does_not_fit_is_said_once(tmp_path):
    """Both processes find the mistake; process 0 says it, the other is ended by mpirun
    before its own (delayed) line: one refusal line and one starting line, exit 2."""
    proc = _mpirun("hardware=cpu-2host", "hardware.hosts=3", cwd=tmp_path, timeout=120)
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = (proc.stdout + proc.stderr).splitlines()
    errors = [ln for ln in lines if "rlexp: error:" in ln]
    assert len(errors) == 1 and ",0]<stderr>:" in errors[0], errors
    assert "runs 3 processes (hardware.hosts=3) but mpirun started 2" in errors[0]
    assert sum("rlexp: starting a run" in ln for ln in lines) == 1, lines
    assert "Traceback" not in proc.stdout + proc.stderr
