"""Helpers shared by the launcher tests: tiny runs, running `python -m rlexp`, reading results.

A sweep dir holds one subdir per job; each job that ran writes summary.json (status FINISHED,
FAILED or KILLED, its error line, its MLflow run id); the MLflow parent run is named in
parent_run.json.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from helpers import cli

# The smallest real training run: 2 RL steps, a handful of eval prompts, the tiny model on
# CPU without its supervised warm start (16 s, and launchers do not care what it learns), so
# a job costs its JAX compile plus seconds (vocab_size=128 repeats conf/model/tiny.yaml's).
TINY = ["train.steps=2", "train.batch_size=2", "eval.num_samples=4", "dataset.num_eval=4",
        "eval.pass_k=1", "run.progress=false", "model.warm_start_steps=0", "model.vocab_size=128"]
# A hardware=cpu-2host job (two processes joined by jax.distributed), for the launchers' tests:
# batches and evaluation that split over its 4-device mesh, one step, 8 completion tokens.
# Each decode step all-gathers the fsdp-sharded weights through gloo's TCP collectives, whose
# polling keeps both cores busy while the job runs: a 2-step job under mpirun took 43.8
# CPU-s at 8 tokens and 54.3 at 24.
TWO_HOST = [*(o for o in TINY if not o.startswith(("train.steps=", "train.batch_size="))),
            "hardware=cpu-2host", "train.steps=1", "train.batch_size=4",
            "rollout.max_completion_length=8"]

# A failure injected into chosen jobs of a real sweep: the training loop of every job whose
# train.seed is $RLEXP_TEST_FAIL_SEED raises after the run started (MLflow run open, summary
# being written), exactly like a crash inside training. Loaded by Python at start-up in every
# process of the sweep (launcher workers included) through PYTHONPATH; inert without the env var.
FAULT_SITECUSTOMIZE = textwrap.dedent('''
    import os

    _seed = os.environ.get("RLEXP_TEST_FAIL_SEED")
    if _seed is not None:
        import rlexp.job.loop as _loop

        _run = _loop.train_steps

        def run(cfg, *args, **kwargs):
            if str(cfg.train.seed) == _seed:
                raise RuntimeError(f"injected failure (train.seed={cfg.train.seed})")
            return _run(cfg, *args, **kwargs)

        _loop.train_steps = run
''')


def fault_env(root: Path, seed: int) -> dict[str, str]:
    """Environment that makes the jobs with train.seed=seed fail inside training."""
    site = root / "fault_site"
    site.mkdir(exist_ok=True)
    (site / "sitecustomize.py").write_text(FAULT_SITECUSTOMIZE)
    path = os.environ.get("PYTHONPATH")
    return {"PYTHONPATH": f"{site}{os.pathsep}{path}" if path else str(site),
            "RLEXP_TEST_FAIL_SEED": str(seed)}


def rlexp(args: list[str], cwd: Path, timeout: int = 900, env: dict | None = None,
          python: str = sys.executable) -> subprocess.CompletedProcess:
    """`python -m rlexp ARGS` in cwd (outputs/ lands there), captured: helpers.cli with a
    sweep's longer timeout."""
    return cli(*args, cwd=cwd, env=env, timeout=timeout, python=python)


def explain(proc: subprocess.CompletedProcess, n: int = 4000) -> str:
    return f"exit {proc.returncode}\n--- stdout\n{proc.stdout[-n:]}\n--- stderr\n{proc.stderr[-n:]}"


def sweep_dirs(cwd: Path) -> list[Path]:
    root = cwd / "outputs" / "sweeps"
    return sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []


def only_sweep_dir(cwd: Path) -> Path:
    dirs = sweep_dirs(cwd)
    assert len(dirs) == 1, f"expected one sweep dir, found {dirs}"
    return dirs[0]


def summaries(sweep_dir: Path) -> dict[str, dict]:
    """Job subdir name -> its summary.json."""
    out = {}
    for path in sorted(sweep_dir.glob("*/summary.json")):
        out[path.parent.name] = json.loads(path.read_text())
    return out


def mlflow_children(sweep_dir: Path) -> tuple[dict, list]:
    """(parent run info, child job runs) of a sweep, from parent_run.json and the MLflow store
    (the parent's group runs, rlexp.role=group, are no jobs)."""
    import mlflow

    from rlexp.tracking.compare import child_runs

    parent = json.loads((sweep_dir / "parent_run.json").read_text())
    client = mlflow.MlflowClient(parent["uri"])
    return {"info": parent, "run": client.get_run(parent["run_id"])}, \
        child_runs(client, parent["run_id"])


def finished_sweep(sweep_dir: Path, key: Any) -> list:
    """Assert every job wrote a FINISHED summary and the parent and every child MLflow run
    FINISHED; returns sorted(key(child) for each child run), for the caller to compare."""
    runs = summaries(sweep_dir)
    assert runs and all(s["status"] == "FINISHED" for s in runs.values()), runs
    parent, children = mlflow_children(sweep_dir)
    assert len(children) == len(runs), (len(children), runs)
    assert all(r.info.status == "FINISHED" for r in children)
    assert parent["run"].info.status == "FINISHED"
    return sorted(key(r) for r in children)


TOY_APP = textwrap.dedent('''
    """A two-option `hardware` group and a task that reports what the scheduler gave it."""
    import json, os, subprocess
    from pathlib import Path

    import hydra


    @hydra.main(config_path="conf", config_name="config", version_base="1.3")
    def main(cfg):
        job = os.environ.get("SLURM_JOB_ID")
        limit = None
        if job:
            limit = subprocess.run(["squeue", "-h", "-j", job, "-o", "%l"], capture_output=True,
                                   text=True).stdout.strip()
        out = {"hardware": cfg.hardware.name, "slurm_job": job,
               "cpus": os.environ.get("SLURM_CPUS_PER_TASK"),
               "partition": os.environ.get("SLURM_JOB_PARTITION"), "time_limit": limit}
        from hydra.core.hydra_config import HydraConfig
        Path(HydraConfig.get().runtime.output_dir, "report.json").write_text(json.dumps(out))
        if cfg.fail:
            raise RuntimeError(f"job {cfg.hardware.name} asked to fail")
        return 1.0


    if __name__ == "__main__":
        main()
''')


def write_toy_app(root: Path, hardware: dict[str, dict]) -> Path:
    """A Hydra app with `hardware` options named like rlexp's keys (cpus_per_task, ...)."""
    (root / "conf" / "hardware").mkdir(parents=True, exist_ok=True)
    (root / "app.py").write_text(TOY_APP)
    first = next(iter(hardware))
    (root / "conf" / "config.yaml").write_text(
        f"defaults:\n  - hardware: {first}\n  - _self_\nfail: false\n"
        "hydra:\n  job:\n    chdir: false\n")
    for name, values in hardware.items():
        lines = [f"name: {name}"] + [f"{k}: {'null' if v is None else v}" for k, v in values.items()]
        (root / "conf" / "hardware" / f"{name}.yaml").write_text("\n".join(lines) + "\n")
    return root / "app.py"


def toy_reports(sweep_dir: Path) -> dict[str, dict]:
    return {json.loads(p.read_text())["hardware"]: json.loads(p.read_text())
            for p in sweep_dir.glob("*/report.json")}
