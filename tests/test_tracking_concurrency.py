"""Four jobs log to one NEW sqlite store at the same moment: the store is created once (file
lock) and no metric point is lost (a write that meets a locked database is retried)."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from mlflow import MlflowClient

pytestmark = pytest.mark.slow

JOBS = 4
STEPS = 150
NAMES = 20

WORKER = """
import sys, time
from pathlib import Path
from rlexp.base.events import RunInfo
from rlexp.tracking.listener import MlflowListener
uri, run_dir, go = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
while not go.exists():
    time.sleep(0.01)
listener = MlflowListener(uri, "concurrent", run_dir, gated=False, flush_every_s=0.05)
listener.on_run_start(RunInfo(name=run_dir.name, run_dir=run_dir, params={"job": run_dir.name},
                              tags={}))
for step in range(1, STEPS + 1):
    listener.on_metrics(step, {f"m/{i}": step + i for i in range(NAMES)})
    time.sleep(0.002)
listener.on_run_end("FINISHED", {})
"""


def test_four_processes_one_new_store_lose_nothing(tmp_path):
    uri = f"sqlite:///{tmp_path / 'store' / 'mlflow.db'}"  # not prepared: the jobs race for it
    go = tmp_path / "go"
    code = WORKER.replace("STEPS", str(STEPS)).replace("NAMES", str(NAMES))
    procs = [subprocess.Popen([sys.executable, "-c", code, uri, str(tmp_path / f"job{j}"),
                               str(go)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True) for j in range(JOBS)]
    time.sleep(4)  # let the interpreters import rlexp, then start together
    go.touch()
    outputs = [p.communicate(timeout=300)[0] for p in procs]
    assert all(p.returncode == 0 for p in procs), outputs
    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("concurrent")
    runs = client.search_runs([exp.experiment_id])
    assert sorted(r.info.run_name for r in runs) == [f"job{j}" for j in range(JOBS)]
    for run in runs:
        assert run.info.status == "FINISHED"
        for i in range(NAMES):
            points = client.get_metric_history(run.info.run_id, f"m/{i}")
            assert sorted(m.step for m in points) == list(range(1, STEPS + 1)), (run, i)
    for j in range(JOBS):
        assert not (tmp_path / f"job{j}" / "tracking_spool.jsonl").exists(), outputs[j]


def test_four_processes_one_mlflow_server_lose_nothing(tmp_path):
    from rlexp.tracking.ui import free_port
    from test_tracking_server import Server

    srv = Server(tmp_path / "server" / "mlflow.db", free_port()).start()
    try:
        go = tmp_path / "go"
        code = WORKER.replace("STEPS", "60").replace("NAMES", str(NAMES))
        procs = [subprocess.Popen([sys.executable, "-c", code, srv.url, str(tmp_path / f"job{j}"),
                                   str(go)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  text=True) for j in range(JOBS)]
        time.sleep(4)
        go.touch()
        outputs = [p.communicate(timeout=300)[0] for p in procs]
        assert all(p.returncode == 0 for p in procs), outputs
        client = MlflowClient(srv.url)
        runs = client.search_runs([client.get_experiment_by_name("concurrent").experiment_id])
        # the jobs' outputs say why a run is short (e.g. its end records left in the spool)
        assert sorted(r.info.status for r in runs) == ["FINISHED"] * JOBS, outputs
        for run in runs:
            for i in range(NAMES):
                points = client.get_metric_history(run.info.run_id, f"m/{i}")
                assert sorted(m.step for m in points) == list(range(1, 61)), (run, i)
    finally:
        srv.stop()
