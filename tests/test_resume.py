"""Reliability: SIGKILL and SIGTERM mid-run, rerun the same command, nothing lost or doubled.

These start real `python -m rlexp` processes (JAX compile included), so they are slow; the
warm-start cache is shared between them to keep each run short.
"""

from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

SMALL = ["train.batch_size=2", "algo.num_generations=2", "dataset.num_eval=4",
         "eval.num_samples=4", "eval.pass_k=2", "model.warm_start_steps=5", "run.progress=false"]


@pytest.fixture(scope="module")
def cache_dir(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("cache")


def _args(cache: Path, *extra: str) -> list[str]:
    return [sys.executable, "-m", "rlexp", *SMALL, f"run.cache_dir={cache}", *extra]


def _run_dir(cwd: Path) -> Path:
    (run,) = (cwd / "outputs" / "runs").iterdir()
    return run


def _step(cwd: Path) -> int:
    try:
        return json.loads(next((cwd / "outputs" / "runs").glob("*/progress.json")).read_text())["step"]
    except (StopIteration, OSError, ValueError):
        return -1


def _start_and_signal(cwd: Path, args: list[str], at_step: int, sig: int) -> tuple[int, str]:
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True)
    deadline = time.monotonic() + 600
    while _step(cwd) < at_step:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the run never reached the step"
        time.sleep(0.02)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


def _history(run_dir: Path, key: str) -> tuple[str, list[int]]:
    from mlflow import MlflowClient

    link = json.loads((run_dir / "tracking.json").read_text())
    client = MlflowClient(link["uri"])
    return link["run_id"], sorted(m.step for m in client.get_metric_history(link["run_id"], key))


def _status(run_dir: Path) -> str:
    from mlflow import MlflowClient

    link = json.loads((run_dir / "tracking.json").read_text())
    return MlflowClient(link["uri"]).get_run(link["run_id"]).info.status


@pytest.mark.slow
def test_sigkill_after_step_6_then_rerun_logs_every_step_once(tmp_path, cache_dir):
    args = _args(cache_dir, "train.steps=12", "train.checkpoint_every=4")
    code, out = _start_and_signal(tmp_path, args, 6, signal.SIGKILL)
    assert code == -signal.SIGKILL
    run_dir = _run_dir(tmp_path)
    first_id = json.loads((run_dir / "tracking.json").read_text())["run_id"]

    rerun = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    run_id, steps = _history(run_dir, "train/loss")
    assert run_id == first_id
    assert steps == list(range(1, 13))  # 12 consecutive steps, each exactly once
    _, evals = _history(run_dir, "eval/accuracy")
    assert evals == sorted(set(evals)) and evals[0] == 0 and evals[-1] == 12
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "FINISHED" and summary["steps_done"] == 12
    assert summary["resumed_from_step"] >= 4
    assert _status(run_dir) == "FINISHED"


@pytest.mark.slow
def test_sigkill_without_checkpoints_restarts_the_same_mlflow_run(tmp_path, cache_dir):
    """train.checkpoint_every=0: nothing to resume from, so the rerun trains from step 0 again,
    in the same MLflow run (one run per run dir), and logs no step twice."""
    args = _args(cache_dir, "train.steps=8", "train.checkpoint_every=0",
                 "tracker.flush_every_s=0.05")
    code, _ = _start_and_signal(tmp_path, args, 4, signal.SIGKILL)
    assert code == -signal.SIGKILL
    run_dir = _run_dir(tmp_path)
    first_id = json.loads((run_dir / "tracking.json").read_text())["run_id"]
    rerun = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "restarts from step 0 in the same MLflow run" in rerun.stdout
    run_id, steps = _history(run_dir, "train/loss")
    assert run_id == first_id and steps == list(range(1, 9))
    from mlflow import MlflowClient

    client = MlflowClient(json.loads((run_dir / "tracking.json").read_text())["uri"])
    assert len(client.search_runs([client.get_run(run_id).info.experiment_id])) == 1
    assert _status(run_dir) == "FINISHED"


def _corrupt(checkpoint: Path) -> None:
    for f in checkpoint.rglob("*"):
        if f.is_file() and "model_params" in str(f):
            f.write_bytes(b"\0garbage")


@pytest.mark.slow
def test_sigterm_checkpoints_marks_killed_and_resumes_past_a_corrupt_checkpoint(tmp_path, cache_dir):
    args = _args(cache_dir, "train.steps=8", "train.checkpoint_every=2")
    code, out = _start_and_signal(tmp_path, args, 3, signal.SIGTERM)
    assert code != 0, out[-2000:]
    run_dir = _run_dir(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "KILLED" and "SIGTERM" in summary["error"]
    assert _status(run_dir) == "KILLED"
    steps = sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())
    stopped_at = max(steps)
    assert summary["steps_done"] == stopped_at  # "killed after N steps", not "?"
    assert stopped_at >= 3  # saved at the step boundary where SIGTERM was seen
    _corrupt(run_dir / "checkpoints" / str(stopped_at))

    rerun = subprocess.run(args, cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert rerun.returncode == 0, rerun.stderr[-3000:]
    assert "unusable" in rerun.stdout + rerun.stderr  # the corrupt one: skipped with a warning
    _, logged = _history(run_dir, "train/loss")
    assert logged == list(range(1, 9))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "FINISHED" and summary["resumed_from_step"] < stopped_at
    assert _status(run_dir) == "FINISHED"


@pytest.mark.slow
def test_nan_reward_stops_the_run_failed_and_keeps_the_checkpoint(tmp_path, cache_dir, monkeypatch):
    import rlexp.data.rewards as rewards
    from rlexp.launch.preflight import preflight
    from rlexp.job.experiment import JobContext, run

    monkeypatch.chdir(tmp_path)
    (cfg,) = preflight([*SMALL, f"run.cache_dir={cache_dir}", "train.steps=4",
                        "train.checkpoint_every=2"]).jobs
    calls: list[int] = []

    def nan_after_probe(prompts, completions, answers, **_):
        # Finite when build() probes it (a NaN there is refused at start), NaN mid-run.
        calls.append(len(completions))
        return [0.0 if len(calls) == 1 else math.nan for _ in completions]

    monkeypatch.setattr(rewards, "answer_close_reward", nan_after_probe)
    run_dir = tmp_path / "outputs" / "runs" / "nan"
    run_dir.mkdir(parents=True)
    job = JobContext(run_dir=run_dir, name="nan", choices={}, overrides=[])
    with pytest.raises(SystemExit) as stopped:
        run(cfg, job)
    assert stopped.value.code == 1
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "FAILED" and "nan" in summary["error"]
    assert "train/reward/answer_close" in summary["error"]
    assert (run_dir / "checkpoints" / "0").is_dir()  # the last good checkpoint is kept
    assert _status(run_dir) == "FAILED"


def test_check_finite_names_the_bad_metric():
    from rlexp.job.loop import NonFinite, check_finite

    check_finite(3, {"train/loss": 0.5, "train/reward_mean": 1.0})
    with pytest.raises(NonFinite, match=r"step 3: train/loss=inf"):
        check_finite(3, {"train/loss": math.inf, "train/reward_mean": 1.0})
    with pytest.raises(NonFinite, match="train/reward/format_exact=nan"):
        check_finite(3, {"train/reward/format_exact": math.nan})


@pytest.mark.parametrize("bad,needle", [
    (["dataset=gsm8k", "dataset.path=/nonexistent/gsm8k.jsonl"], "dataset.path"),
    (["model=qwen3-0.6b", "model.path=/nonexistent/qwen"], "model.path"),
])
def test_bad_paths_exit_2_and_leave_nothing(tmp_path, bad, needle):
    proc = subprocess.run([sys.executable, "-m", "rlexp", *bad], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300,
                          env={**os.environ, "HF_DATASETS_OFFLINE": "1"})
    assert proc.returncode == 2, proc.stderr[-2000:]
    lines = [line for line in proc.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and needle in lines[0] and "Traceback" not in proc.stderr
    runs = tmp_path / "outputs" / "runs"
    assert not runs.exists() or not any(runs.iterdir())
    db = tmp_path / "outputs" / "mlflow.db"
    if db.exists():  # the store may exist, but holds no run of this command
        from mlflow import MlflowClient

        client = MlflowClient(f"sqlite:///{db}")
        assert not client.search_runs([e.experiment_id for e in client.search_experiments()])
