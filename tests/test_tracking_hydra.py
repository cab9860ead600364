"""The sweep callback inside a real Hydra multirun (a tiny app written by the test): one
parent run, the jobs nested under it, the summary table; a sweep that dies closes its parent
FAILED through the atexit hook."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from mlflow import MlflowClient

from rlexp.tracking import parent_run_id

pytestmark = pytest.mark.slow

APP = '''
import json
from pathlib import Path

import hydra
from hydra.core.hydra_config import HydraConfig

from rlexp.base.events import RunInfo
from rlexp.tracking import parent_run_id, run_id
from rlexp.tracking.listener import MlflowListener


@hydra.main(config_path=".", config_name="config", version_base="1.3")
def main(cfg):
    if cfg.algo.beta < 0:
        raise RuntimeError("this job fails")
    hc = HydraConfig.get()
    run_dir = Path(hc.runtime.output_dir)
    listener = MlflowListener(cfg.tracker.uri, cfg.tracker.experiment, run_dir, gated=False,
                              flush_every_s=3600)
    listener.on_run_start(RunInfo(
        name=f"beta{cfg.algo.beta}", run_dir=run_dir, params={"algo.beta": cfg.algo.beta},
        tags={}, extra={"parent_run_id": parent_run_id(Path(hc.sweep.dir))}))
    for step in range(1, 4):
        listener.on_metrics(step, {"train/reward_mean": step * cfg.algo.beta})
        listener.on_eval(step, {"eval/accuracy": step * cfg.algo.beta / 3}, [])
    summary = {"name": f"beta{cfg.algo.beta}", "status": "FINISHED", "steps_done": 3,
               "wall_s": 1.0, "overrides": list(hc.overrides.task),
               "mlflow_run_id": run_id(run_dir)}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    listener.on_run_end("FINISHED", summary)


main()
'''

CONFIG = '''
algo:
  beta: 0.0
tracker:
  name: mlflow
  uri: null
  experiment: hydra-sweep
hydra:
  sweep:
    dir: sweeps/${hydra.job.name}-${algo.beta}
    subdir: ${hydra.job.num}
  callbacks:
    mlflow_sweep:
      _target_: rlexp.tracking.callback.SweepCallback
'''


def multirun(app_dir: Path, uri: str, betas: str, sweep: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "app.py", "-m", f"algo.beta={betas}", f"tracker.uri={uri}",
         f"hydra.sweep.dir=sweeps/{sweep}"], cwd=app_dir, capture_output=True, text=True,
        timeout=300)


def test_real_multirun_nests_jobs_under_one_parent(tmp_path):
    (tmp_path / "app.py").write_text(APP)
    (tmp_path / "config.yaml").write_text(CONFIG)
    uri = f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"
    done = multirun(tmp_path, uri, "0.1,0.2", "ok")
    assert done.returncode == 0, done.stderr[-3000:]
    sweep_dir = tmp_path / "sweeps" / "ok"
    parent = parent_run_id(sweep_dir)
    client = MlflowClient(uri)
    run = client.get_run(parent)
    # Sweep parents are named by what the sweep varies (the dir name stays in a tag).
    assert run.info.run_name == "sweep: beta" and run.info.status == "FINISHED"
    children = client.search_runs([run.info.experiment_id],
                                  f"tags.`mlflow.parentRunId` = '{parent}'")
    assert sorted(r.info.run_name for r in children) == ["beta0.1", "beta0.2"]
    assert all(r.info.status == "FINISHED" for r in children)
    table = (sweep_dir / "summary.md").read_text()
    assert table.count("| beta0.") == 2 and "algo.beta" in table
    assert {"summary.csv", "summary.md", "comparison.png"} <= \
        {a.path for a in client.list_artifacts(parent)}

    failed = multirun(tmp_path, uri, "0.3,-1", "broken")  # the second job raises
    assert failed.returncode != 0
    parent = parent_run_id(tmp_path / "sweeps" / "broken")
    assert client.get_run(parent).info.status == "FAILED"  # closed at exit, not left RUNNING
