"""A real `mlflow server` (started by `python -m rlexp.ui`): a run logs through it, the
server goes away mid-run and comes back, and nothing is lost or logged twice."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest
from mlflow import MlflowClient

from rlexp.base.events import RunInfo
from rlexp.tracking.sync import sync
from rlexp.tracking import run_id
from rlexp.tracking.listener import MlflowListener
from rlexp.tracking.spool import SPOOL_FILE
from rlexp.tracking.ui import free_port
from rlexp.base.runtime import environment  # os.environ copied safely from other threads

pytestmark = pytest.mark.slow

NAMES = [f"train/m{i}" for i in range(20)]


class Server:
    """`python -m rlexp.ui` on a fixed port and sqlite store; stop() and start() again."""

    def __init__(self, db: Path, port: int):
        self.db, self.port, self.proc = db, port, None
        self.url = f"http://127.0.0.1:{port}"

    def start(self) -> "Server":
        from rlexp.tracking import prepare_store

        self.db.parent.mkdir(parents=True, exist_ok=True)
        prepare_store(f"sqlite:///{self.db}")  # rlexp.ui serves a store, never creates one
        env = {**environment(), "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "rlexp.ui", "--port", str(self.port), "--uri",
             f"sqlite:///{self.db}"], env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(f"{self.url}/health", timeout=2) as response:
                    if response.status == 200:
                        return self
            except OSError:
                time.sleep(0.5)
        self.stop()
        raise RuntimeError("mlflow server did not answer /health")

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)  # rlexp.ui stops its server
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()
        self.proc = None


@pytest.fixture
def server(tmp_path):
    srv = Server(tmp_path / "server" / "mlflow.db", free_port()).start()
    yield srv
    srv.stop()


def steps(client: MlflowClient, rid: str, name: str) -> list[int]:
    return sorted(m.step for m in client.get_metric_history(rid, name))


def log(listener: MlflowListener, first: int, last: int) -> None:
    for step in range(first, last + 1):
        listener.on_metrics(step, {name: step + i for i, name in enumerate(NAMES)})


def test_server_goes_away_mid_run_and_comes_back(server, tmp_path, capsys):
    run_dir = tmp_path / "run"
    listener = MlflowListener(server.url, "served", run_dir, gated=True, flush_every_s=3600.0)
    listener.on_run_start(RunInfo(name="served", run_dir=run_dir, params={"algo.beta": 0.04},
                                  tags={"algo": "grpo"}))
    log(listener, 1, 5)
    listener.on_checkpoint(5, run_dir / "ckpt")
    assert listener.flush(timeout=60)
    client = MlflowClient(server.url)
    rid = run_id(run_dir)
    assert steps(client, rid, NAMES[0]) == [1, 2, 3, 4, 5]

    server.stop()
    log(listener, 6, 10)
    listener.on_eval(10, {"eval/accuracy": 0.5}, [{"prompt": "p", "completion": "c"}])
    listener.on_checkpoint(10, run_dir / "ckpt")
    assert not listener.flush(timeout=60)  # the write fails: training goes on
    assert "unreachable" in capsys.readouterr().err
    spooled = [json.loads(line) for line in (run_dir / SPOOL_FILE).read_text().splitlines()]
    assert sorted({r["step"] for r in spooled if r["kind"] == "metrics"}) == list(range(6, 11))

    server.start()
    log(listener, 11, 12)
    listener.on_checkpoint(12, run_dir / "ckpt")
    assert listener.flush(timeout=60)  # retried: the spool goes out
    assert "reachable again" in capsys.readouterr().err
    listener.on_run_end("FINISHED", {"steps_done": 12})
    for name in NAMES:
        assert steps(client, rid, name) == list(range(1, 13)), name
    assert steps(client, rid, "eval/accuracy") == [10]
    run = client.get_run(rid)
    assert run.info.status == "FINISHED" and run.data.params["algo.beta"] == "0.04"
    assert {"curves.png", "summary.json", "eval_samples"} <= \
        {a.path for a in client.list_artifacts(rid)}
    assert not (run_dir / SPOOL_FILE).exists()

    # The server is down when a second run ends: `rlexp.sync` sends the rest later.
    run_dir = tmp_path / "run2"
    listener = MlflowListener(server.url, "served", run_dir, gated=False, flush_every_s=3600)
    listener.on_run_start(RunInfo(name="late", run_dir=run_dir, params={}, tags={}))
    log(listener, 1, 3)
    server.stop()
    listener.on_run_end("FINISHED", {})
    assert (run_dir / SPOOL_FILE).exists()
    server.start()
    sync(run_dir)
    rid = run_id(run_dir)
    assert steps(client, rid, NAMES[-1]) == [1, 2, 3]
    assert client.get_run(rid).info.status == "FINISHED"
