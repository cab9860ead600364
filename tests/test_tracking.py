"""The MLflow listener against real sqlite stores: what lands where, exactly once, never fatal.

The listener is driven directly with the events the loop emits (no JAX needed).
"""

from __future__ import annotations

import atexit
import json
import shutil
import signal
import threading
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient
from omegaconf import OmegaConf

from rlexp.config.schema import Config
from rlexp.base.errors import UserError
from rlexp.tracking import default_uri, make_listener, parent_run_id, prepare_store, run_id
from rlexp.tracking.callback import SweepCallback, parent_status
from rlexp.tracking.listener import MlflowListener
from rlexp.tracking.spool import SPOOL_FILE, Spool
from rlexp.tracking.sync import sync
from helpers import METRICS, crash, history, info, metrics
from rlexp.base.runtime import environment  # os.environ copied safely from other threads

def test_simulated_run_lands_in_store(uri, client, tmp_path):
    run_dir = tmp_path / "run"
    listener = MlflowListener(uri, "simulated", run_dir, gated=True, flush_every_s=3600.0)
    start = info(run_dir, "sim-run")
    start.params.update({"model.path": None, "odd key:é?": "x" * 7000})
    listener.on_run_start(start)
    rid = run_id(run_dir)
    assert rid is not None
    samples = [{"prompt": "1+2=", "completion": "<answer>3</answer>", "reward": 1.5}]
    for step in range(1, 7):
        listener.on_metrics(step, metrics(step))
        if step % 2 == 0:
            listener.on_eval(step, {"eval/accuracy": step / 10, "eval/pass_at_k": 0.9}, samples)
        if step == 3:
            listener.on_checkpoint(3, run_dir / "checkpoints" / "3")
        if step == 5:  # the gate: nothing after the checkpoint at 3 is in the store yet
            assert listener.flush(timeout=30)
            assert history(client, rid, "train/loss") == [1, 2, 3]
    (run_dir / "notes.txt").write_text("hello")
    listener.on_artifact(run_dir / "notes.txt")
    listener.on_checkpoint(6, run_dir / "checkpoints" / "6")
    listener.on_run_end("FINISHED", {"steps_done": 6, "status": "FINISHED"})

    run = client.get_run(rid)
    assert run.info.status == "FINISHED" and run.info.run_name == "sim-run"
    assert run.data.params["algo.beta"] == "0.04" and run.data.params["model.path"] == "None"
    long = run.data.params["odd key_é_"]  # sanitized key, value cut to MLflow's 6000 limit
    assert len(long) == 6000 and long.endswith("...")
    assert run.data.tags["algo"] == "grpo" and run.data.tags["rlexp.run_dir"] == str(run_dir)
    for name in METRICS:
        assert history(client, rid, name) == [1, 2, 3, 4, 5, 6], name
    assert history(client, rid, "eval/accuracy") == [2, 4, 6]
    assert run.data.metrics["train/reward_mean"] == pytest.approx(6.0)
    top = {a.path for a in client.list_artifacts(rid)}
    assert {"curves.png", "summary.json", "notes.txt", "eval_samples"} <= top
    tables = [a.path for a in client.list_artifacts(rid, "eval_samples")]
    assert tables == [f"eval_samples/step_00000{s}.json" for s in (2, 4, 6)]
    table = json.loads(Path(client.download_artifacts(rid, tables[0], str(tmp_path))).read_text())
    assert table["columns"] == ["prompt", "completion", "reward"]
    assert table["data"] == [["1+2=", "<answer>3</answer>", 1.5]]
    logged = json.loads(run.data.tags["mlflow.loggedArtifacts"])
    assert {"path": "eval_samples/step_000006.json", "type": "table"} in logged
    assert (run_dir / "curves.png").read_bytes()[:4] == b"\x89PNG"
    assert not (run_dir / SPOOL_FILE).exists()  # everything sent


def test_resume_logs_each_step_exactly_once(uri, client, tmp_path):
    run_dir = tmp_path / "run"
    first = MlflowListener(uri, "resume", run_dir, gated=True, flush_every_s=3600.0)
    first.on_run_start(info(run_dir))
    for step in range(1, 7):
        first.on_metrics(step, metrics(step))
        if step == 4:
            first.on_checkpoint(4, run_dir / "ckpt")
    rid = run_id(run_dir)
    assert first.flush(timeout=30)
    assert history(client, rid, "train/loss") == [1, 2, 3, 4]
    crash(first)

    second = MlflowListener(uri, "resume", run_dir, gated=True, flush_every_s=3600.0)
    second.on_run_start(info(run_dir, start_step=4))
    second.on_eval(4, {"eval/accuracy": 0.5}, [])  # an eval at the resumed step: logged before
    for step in range(5, 9):
        second.on_metrics(step, metrics(step, offset=100.0))  # produced again, other values
    second.on_checkpoint(8, run_dir / "ckpt")
    second.on_run_end("FINISHED", {})

    assert run_id(run_dir) == rid
    for name in METRICS:
        assert history(client, rid, name) == list(range(1, 9)), name
    values = {m.step: m.value for m in client.get_metric_history(rid, "train/reward_mean")}
    assert values[4] == pytest.approx(4.0) and values[5] == pytest.approx(105.0)
    assert client.get_run(rid).info.status == "FINISHED"
    assert client.get_run(rid).data.tags["rlexp.resumed_from_step"] == "4"


def test_resume_when_the_checkpoint_event_was_lost(uri, client, tmp_path):
    """Crash after the checkpoint was saved but before on_checkpoint reached the listener:
    steps up to the checkpoint come from the spool, later ones are dropped and redone."""
    run_dir = tmp_path / "run"
    first = MlflowListener(uri, "lost-ckpt", run_dir, gated=True, flush_every_s=3600.0)
    first.on_run_start(info(run_dir))
    for step in range(1, 7):
        first.on_metrics(step, metrics(step))
    rid = run_id(run_dir)
    assert first.flush(timeout=30)
    assert history(client, rid, "train/loss") == []  # no checkpoint reported: nothing sent
    crash(first)

    second = MlflowListener(uri, "lost-ckpt", run_dir, gated=True, flush_every_s=3600.0)
    second.on_run_start(info(run_dir, start_step=4))
    for step in range(5, 7):
        second.on_metrics(step, metrics(step, offset=100.0))
    second.on_run_end("FINISHED", {})
    assert history(client, rid, "train/loss") == [1, 2, 3, 4, 5, 6]
    values = {m.step: m.value for m in client.get_metric_history(rid, "train/reward_mean")}
    assert values[4] == pytest.approx(4.0) and values[6] == pytest.approx(106.0)


def test_killed_run_keeps_unckeckpointed_steps_for_the_resume(uri, client, tmp_path):
    run_dir = tmp_path / "run"
    listener = MlflowListener(uri, "killed", run_dir, gated=True, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir))
    for step in range(1, 6):
        listener.on_metrics(step, metrics(step))
        if step == 2:
            listener.on_checkpoint(2, run_dir / "ckpt")
    listener.on_run_end("KILLED", {"status": "KILLED"})
    rid = run_id(run_dir)
    assert client.get_run(rid).info.status == "KILLED"
    assert history(client, rid, "train/loss") == [1, 2]
    assert (run_dir / SPOOL_FILE).exists()  # steps 3..5 wait: a resume produces them again
    resumed = MlflowListener(uri, "killed", run_dir, gated=True, flush_every_s=3600.0)
    resumed.on_run_start(info(run_dir, start_step=2))
    assert client.get_run(rid).info.status == "RUNNING"
    for step in range(3, 9):
        resumed.on_metrics(step, metrics(step))
    resumed.on_run_end("FINISHED", {})
    assert history(client, rid, "train/loss") == list(range(1, 9))


def test_without_checkpoints_metrics_are_buffered_by_time(uri, client, tmp_path):
    run_dir = tmp_path / "run"
    listener = MlflowListener(uri, "timed", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir))
    rid = run_id(run_dir)
    for step in range(1, 11):
        listener.on_metrics(step, metrics(step))
    assert history(client, rid, "train/loss") == []  # buffered (and spooled)
    assert sum(1 for _ in open(run_dir / SPOOL_FILE)) == 10
    assert listener.flush(timeout=30)
    assert history(client, rid, "train/loss") == list(range(1, 11))
    listener.on_run_end("FAILED", {})
    assert client.get_run(rid).info.status == "FAILED"

    run_dir = tmp_path / "timer"  # the writer's timer sends without being asked
    listener = MlflowListener(uri, "timed", run_dir, gated=False, flush_every_s=0.2)
    listener.on_run_start(info(run_dir))
    for step in range(1, 4):
        listener.on_metrics(step, metrics(step))
    deadline = time.monotonic() + 30
    while history(client, run_id(run_dir), "train/loss") != [1, 2, 3]:
        assert time.monotonic() < deadline
        time.sleep(0.1)
    listener.on_run_end("FINISHED", {})


def test_run_end_from_a_signal_handler(uri, client, tmp_path):
    """SIGTERM's handler may call on_run_end at any bytecode of the loop's thread: the store
    is only written by the writer thread, so nothing is re-entered and nothing is lost."""
    run_dir = tmp_path / "run"
    listener = MlflowListener(uri, "signal", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir))
    previous = signal.signal(signal.SIGUSR1, lambda *_: listener.on_run_end(
        "KILLED", {"status": "KILLED"}))
    try:
        for step in range(1, 7):
            listener.on_metrics(step, metrics(step))
            if step == 3:
                signal.raise_signal(signal.SIGUSR1)
    finally:
        signal.signal(signal.SIGUSR1, previous)
    rid = run_id(run_dir)
    assert client.get_run(rid).info.status == "KILLED"
    assert history(client, rid, "train/loss") == [1, 2, 3]  # later events: after the end
    listener.on_run_end("FINISHED", {})  # twice: ignored
    assert client.get_run(rid).info.status == "KILLED"


def test_run_end_from_a_signal_inside_a_spool_write(uri, client, tmp_path):
    """The handler lands while add() holds the spool lock: on_run_end must not wait for the
    writer (it needs that lock); it spools the end and returns, and sync finishes the run."""
    run_dir = tmp_path / "run"
    listener = MlflowListener(uri, "signal-in-add", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir))
    spool = listener.run.spool
    append = spool.append

    def append_then_signal(record: dict) -> None:
        append(record)
        if record.get("step") == 2:  # as if SIGTERM's handler ran right here
            listener.on_run_end("KILLED", {})

    spool.append = append_then_signal
    started = time.monotonic()
    for step in range(1, 4):
        listener.on_metrics(step, metrics(step))
    assert time.monotonic() - started < 5
    listener._stop_writer()
    listener._release_lock()
    sync(run_dir)
    rid = run_id(run_dir)
    assert client.get_run(rid).info.status == "KILLED"
    assert history(client, rid, "train/loss") == [1, 2]


def test_run_end_while_the_environment_thread_writes_the_spool_finishes_the_run(
        uri, client, tmp_path, capsys, monkeypatch):
    """A short run ends while the environment thread is inside add() (environment.json): no
    signal landed in this thread's add, so on_run_end waits for the lock and the run is
    FINISHED (a 60-step job once stayed RUNNING, warned of a signal that never came)."""
    run_dir = tmp_path / "run"
    inside, release = threading.Event(), threading.Event()
    append = Spool.append

    def slow_environment(self, record: dict) -> None:
        if record.get("artifact_file") == "environment.json":
            inside.set()
            release.wait(30)
        append(self, record)

    monkeypatch.setattr(Spool, "append", slow_environment)
    listener = MlflowListener(uri, "busy-end", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir))
    assert inside.wait(30)
    threading.Timer(0.5, release.set).start()
    listener.on_run_end("FINISHED", {"status": "FINISHED"})
    assert "signal" not in capsys.readouterr().err
    rid = run_id(run_dir)
    assert client.get_run(rid).info.status == "FINISHED"
    assert "environment.json" in {a.path for a in client.list_artifacts(rid)}


def test_unreachable_store_spools_then_sync_replays(uri, client, tmp_path, capsys):
    from rlexp.tracking.ui import free_port

    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    run_dir = tmp_path / "run"
    listener = MlflowListener(down, "offline", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir, "offline-run"))
    for step in range(1, 21):
        listener.on_metrics(step, metrics(step))
    listener.on_eval(20, {"eval/accuracy": 0.75}, [{"prompt": "p", "completion": "c"}])
    listener.on_run_end("FINISHED", {"steps_done": 20})
    err = capsys.readouterr().err
    assert err.count("unreachable (") == 1 and "python -m rlexp.sync" in err  # one warning
    assert run_id(run_dir) is None and (run_dir / SPOOL_FILE).exists()

    message = sync(run_dir, uri=uri)  # the store is reachable (here: at another address)
    assert "sent" in message
    rid = run_id(run_dir)
    run = client.get_run(rid)
    assert run.info.run_name == "offline-run" and run.info.status == "FINISHED"
    assert run.data.params["algo.beta"] == "0.04"
    for name in METRICS:
        assert history(client, rid, name) == list(range(1, 21))
    assert history(client, rid, "eval/accuracy") == [20]
    assert {"curves.png", "summary.json", "eval_samples"} <= \
        {a.path for a in client.list_artifacts(rid)}
    assert not (run_dir / SPOOL_FILE).exists()
    sync(run_dir)  # twice: nothing more, nothing twice
    assert history(client, rid, "train/loss") == list(range(1, 21))


def test_sync_refuses_a_live_run_and_a_dir_without_tracking(uri, tmp_path):
    run_dir = tmp_path / "run"
    listener = MlflowListener(uri, "live", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir))
    with pytest.raises(UserError, match="live process"):
        sync(run_dir)
    listener.on_run_end("FINISHED", {})
    sync(run_dir)
    with pytest.raises(UserError, match="no tracking.json"):
        sync(tmp_path / "elsewhere")
    plain = tmp_path / "plain"  # a dir, not a run dir: refused, nothing written in it
    plain.mkdir()
    with pytest.raises(UserError, match="no tracking.json"):
        sync(plain)
    assert list(plain.iterdir()) == []


def test_sync_marks_a_crashed_run_killed(uri, client, tmp_path):
    run_dir = tmp_path / "run"
    listener = MlflowListener(uri, "crashed", run_dir, gated=True, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir))
    for step in range(1, 4):
        listener.on_metrics(step, metrics(step))
    listener.on_checkpoint(2, run_dir / "ckpt")
    crash(listener)
    assert "held back" in sync(run_dir)
    rid = run_id(run_dir)
    assert client.get_run(rid).info.status == "KILLED"
    assert history(client, rid, "train/loss") == [1, 2]
    sync(run_dir, send_all=True)  # no resume coming: send step 3 too
    assert history(client, rid, "train/loss") == [1, 2, 3]


def test_sync_ends_killed_a_crashed_run_the_store_never_had(uri, client, tmp_path):
    """The store down for a run's whole life, then a crash: sync makes the run and ends it
    KILLED; so too when an earlier attempt ended FAILED (spooled) and its rerun crashed."""
    from rlexp.tracking.ui import free_port

    down = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    crashed, rerun = tmp_path / "crashed", tmp_path / "rerun"
    first = MlflowListener(down, "down", crashed, gated=False, flush_every_s=3600.0)
    first.on_run_start(info(crashed))
    first.on_metrics(1, metrics(1))
    crash(first)
    failed = MlflowListener(down, "down", rerun, gated=False, flush_every_s=3600.0)
    failed.on_run_start(info(rerun))
    failed.on_metrics(1, metrics(1))
    failed.on_run_end("FAILED", {})
    again = MlflowListener(down, "down", rerun, gated=False, flush_every_s=3600.0)
    again.on_run_start(info(rerun))
    for step in (1, 2):
        again.on_metrics(step, metrics(step))
    crash(again)
    for run_dir, steps in ((crashed, [1]), (rerun, [1, 2])):
        assert run_id(run_dir) is None
        sync(run_dir, uri=uri)
        rid = run_id(run_dir)
        assert client.get_run(rid).info.status == "KILLED", run_dir.name
        assert history(client, rid) == steps


def test_restart_from_step_0_reopens_the_same_run(uri, client, tmp_path, capsys):
    """checkpoint_every=0 (no gate): a crashed run restarts from step 0 in the same MLflow run;
    steps the store or the spool already has are not logged twice, later ones are logged."""
    run_dir = tmp_path / "run"
    first = MlflowListener(uri, "restart", run_dir, gated=False, flush_every_s=3600.0)
    first.on_run_start(info(run_dir))
    for step in (1, 2):
        first.on_metrics(step, metrics(step))
    assert first.flush(timeout=30)  # steps 1-2 in the store
    first.on_metrics(3, metrics(3))  # step 3 only in the spool
    old = run_id(run_dir)
    crash(first)
    second = MlflowListener(uri, "restart", run_dir, gated=False, flush_every_s=3600.0)
    second.on_run_start(info(run_dir))  # no checkpoint: training restarts from step 0
    assert "restarts from step 0 in the same MLflow run" in capsys.readouterr().out
    for step in range(1, 6):
        second.on_metrics(step, metrics(step, offset=100.0))
    second.on_run_end("FINISHED", {})
    assert run_id(run_dir) == old
    assert history(client, old, "train/loss") == [1, 2, 3, 4, 5]
    values = {m.step: m.value for m in client.get_metric_history(old, "train/reward_mean")}
    assert values[3] == pytest.approx(3.0) and values[4] == pytest.approx(104.0)
    assert client.get_run(old).info.status == "FINISHED"
    exp = client.get_experiment_by_name("restart")
    assert len(client.search_runs([exp.experiment_id])) == 1  # one run per run dir


def test_uri_and_listener_follow_the_config(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("MLFLOW_TRACKING_URI", raising=False)
    cfg = Config()
    assert default_uri(cfg) == f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5999")
    assert default_uri(cfg) == "http://127.0.0.1:5999"
    cfg.tracker.uri = "sqlite:///rel/m.db"
    assert default_uri(cfg) == f"sqlite:///{tmp_path / 'rel' / 'm.db'}"
    cfg.train.checkpoint_every = 5
    listener = make_listener(cfg, tmp_path / "run")
    assert isinstance(listener, MlflowListener) and listener.gated
    cfg.tracker.name = "none"
    assert default_uri(cfg) is None and make_listener(cfg, tmp_path / "run") is None
    with pytest.raises(UserError, match="file store"):
        prepare_store(str(tmp_path / "mlruns"))


def test_prepare_store_puts_artifacts_next_to_the_db(uri, client):
    prepare_store(uri)  # idempotent
    db = Path(uri[len("sqlite:///"):])
    assert client.get_experiment("0").artifact_location == str(db.parent / "mlartifacts" / "0")
    run_dir = db.parent / "run"
    listener = MlflowListener(uri, "located", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir))
    listener.on_run_end("FINISHED", {})
    assert client.get_run(run_id(run_dir)).info.artifact_uri.startswith(
        str(db.parent / "mlartifacts" / "located"))


# ------------------------------------------------------------------------------ sweeps


def sweep_config(sweep_dir: Path, uri: str, experiment: str = "sweep") -> OmegaConf:
    return OmegaConf.create({
        "tracker": {"name": "mlflow", "uri": uri, "experiment": experiment},
        "hydra": {"sweep": {"dir": str(sweep_dir)},
                  "overrides": {"task": ["algo.beta=0,0.04", "train.steps=3"]}}})


def child(uri: str, sweep_dir: Path, beta: float, status: str = "FINISHED",
          experiment: str = "sweep") -> str:
    """One job of the sweep, as the orchestrator runs it: listener, then summary.json."""
    run_dir = sweep_dir / f"beta{beta}"
    listener = MlflowListener(uri, experiment, run_dir, gated=False, flush_every_s=3600.0)
    start = info(run_dir, f"beta{beta}", parent_run_id=parent_run_id(sweep_dir))
    start.params = {"algo.beta": beta, "algo.name": "grpo", "train.steps": 3}
    listener.on_run_start(start)
    for step in range(1, 4):
        listener.on_metrics(step, {"train/reward_mean": step * (1 + beta)})
        listener.on_eval(step, {"eval/accuracy": step * beta}, [])
    summary = {"name": run_dir.name, "status": status, "overrides": [f"algo.beta={beta}"],
               "steps_done": 3, "wall_s": 1.5, "eval_after": {"eval/accuracy": 3 * beta},
               "mlflow_run_id": run_id(run_dir)}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    listener.on_run_end(status, summary)
    return run_id(run_dir)


def test_sweep_callback_makes_one_parent_with_its_children(uri, client, tmp_path):
    sweep_dir = tmp_path / "sweeps" / "beta-sweep"
    config = sweep_config(sweep_dir, uri)
    callback = SweepCallback()
    callback.on_multirun_start(config)
    parent = parent_run_id(sweep_dir)
    assert parent is not None
    kids = {child(uri, sweep_dir, beta) for beta in (0.0, 0.04)}
    callback.on_multirun_end(config)

    run = client.get_run(parent)
    assert run.info.run_name == "sweep: beta" and run.info.status == "FINISHED"
    assert run.data.tags["rlexp.dir_name"] == "beta-sweep"
    assert run.data.tags["rlexp.sweep_id"] == "beta-sweep"
    assert run.data.params["algo.beta"] == "0,0.04"
    found = client.search_runs([run.info.experiment_id],
                               f"tags.`mlflow.parentRunId` = '{parent}'")
    assert {r.info.run_id for r in found} == kids
    assert {a.path for a in client.list_artifacts(parent)} >= \
        {"summary.csv", "summary.md", "comparison.png"}
    lines = (sweep_dir / "summary.csv").read_text().splitlines()
    assert lines[0].startswith("run,algo.beta,final reward,final acc,best acc")
    assert len(lines) == 3 and lines[1].startswith("beta0.04,0.04,3.12,0.12,0.12,3,1.5,")
    # the parent copies no child's values; with one seed per group no group runs carry curves
    tags = run.data.tags
    assert not run.data.metrics and "rlexp.best_child" not in tags
    assert tags["mlflow.source.name"] and tags["mlflow.user"]
    assert "sweep dir: " + str(sweep_dir.resolve()) in tags["mlflow.note.content"]
    assert "`python " in tags["mlflow.note.content"]  # the sweep command
    # the end line names the parent (run id and store: no UI is known)
    assert f"run {parent} in {uri}" in callback.end_line

    again = SweepCallback()  # the same sweep once more: same parent, reopened
    again.on_multirun_start(config)
    assert parent_run_id(sweep_dir) == parent
    assert client.get_run(parent).info.status == "RUNNING"
    again.on_multirun_end(config)


def test_sweep_parent_fails_when_a_child_fails(uri, client, tmp_path):
    sweep_dir = tmp_path / "sweep"
    config = sweep_config(sweep_dir, uri)
    callback = SweepCallback()
    callback.on_multirun_start(config)
    child(uri, sweep_dir, 0.0)
    child(uri, sweep_dir, 0.04, status="FAILED")
    callback.close(completed=False)  # what the atexit hook does when Hydra stops early
    assert client.get_run(parent_run_id(sweep_dir)).info.status == "FAILED"
    assert "FAILED" in (sweep_dir / "summary.md").read_text()


def test_sync_of_a_sweep_dir_ends_the_parent_its_sweep_could_not(uri, client, tmp_path,
                                                                 monkeypatch, capsys):
    """The store fails at the sweep's end: the parent stays RUNNING and the sweep notes that it
    ran to its end; `rlexp.sync SWEEP_DIR`, the store back, ends it as the sweep would have."""
    from mlflow.exceptions import MlflowException

    from rlexp.tracking import compare

    sweep_dir = tmp_path / "sweep"
    config = sweep_config(sweep_dir, uri)
    callback = SweepCallback()
    callback.on_multirun_start(config)
    for beta in (0.0, 0.04):
        child(uri, sweep_dir, beta)

    def down(*args, **kwargs):
        raise MlflowException("API request failed: connection refused")

    with monkeypatch.context() as patch:
        patch.setattr(compare, "child_runs", down)
        callback.on_multirun_end(config)
    parent = parent_run_id(sweep_dir)
    assert client.get_run(parent).info.status == "RUNNING"
    assert f"python -m rlexp.sync {sweep_dir.resolve()}" in capsys.readouterr().err

    account = sync(sweep_dir)
    assert account.splitlines()[:2] == [f"beta{b}: sent 0 records to MLflow run "
                                        f"{run_id(sweep_dir / f'beta{b}')} ({uri})"
                                        for b in (0.0, 0.04)]
    assert account.splitlines()[2] == (f"sweep sweep: parent run {parent} ended: 2 runs "
                                       f"FINISHED ({uri})")
    assert client.get_run(parent).info.status == "FINISHED"
    assert "summary.md" in {a.path for a in client.list_artifacts(parent)}
    assert not (sweep_dir / "parent_unclosed.json").exists()
    assert sync(sweep_dir).endswith(f"parent run {parent} already FINISHED ({uri})")


def test_sync_ends_the_parent_of_a_killed_sweep_failed_and_leaves_a_live_one(uri, client,
                                                                            tmp_path):
    """A sweep whose process died (no end, no note) did not complete: FAILED, though each of
    its runs finished; while the sweep runs, sync leaves its parent to it."""
    sweep_dir = tmp_path / "sweep"
    callback = SweepCallback()
    callback.on_multirun_start(sweep_config(sweep_dir, uri))
    atexit.unregister(callback.close)  # the process "dies": no atexit close
    child(uri, sweep_dir, 0.0)
    with pytest.raises(UserError, match="the sweep ends its parent run itself"):
        sync(sweep_dir)
    callback._dir_lock.release()  # the dead process's lock goes with it
    assert sync(sweep_dir).endswith("ended: 1 run FINISHED, the sweep stopped before its "
                                    f"end: FAILED ({uri})")
    assert client.get_run(parent_run_id(sweep_dir)).info.status == "FAILED"
    with pytest.raises(UserError, match="is a sweep dir: --new-run"):
        sync(sweep_dir, new_run=True)


def test_sync_of_a_sweep_dir_goes_on_past_a_run_it_cannot_send(uri, client, tmp_path):
    """One run that cannot sync (its tracking.json's URI masked) holds back no other; the
    parent is left RUNNING until every run syncs; a sweep without a parent run file (its store
    down at the start: Hydra's multirun.yaml says it is a sweep) still syncs its runs."""
    from rlexp.tracking.spool import Link

    sweep_dir = tmp_path / "sweep"
    config = sweep_config(sweep_dir, uri)
    callback = SweepCallback()
    callback.on_multirun_start(config)
    atexit.unregister(callback.close)  # the sweep's process ends without closing the parent
    for beta in (0.0, 0.04):
        child(uri, sweep_dir, beta)
    callback._dir_lock.release()
    bad = sweep_dir / "beta0.0"
    link = Link.load(bad)
    link.uri = "http://alice:***@127.0.0.1:1/"
    link.save(bad)
    with pytest.raises(UserError, match=r"^sweep sweep: 1 of 2 runs not synced \(first: "
                                        r"beta0.0: .*credentials masked"):
        sync(sweep_dir)
    assert client.get_run(parent_run_id(sweep_dir)).info.status == "RUNNING"
    (sweep_dir / "parent_run.json").rename(sweep_dir / "multirun.yaml")
    shutil.rmtree(bad)
    assert sync(sweep_dir).splitlines()[-1] == ("sweep sweep: no parent run (none was made: "
                                                "its runs are top-level)")


def test_a_sweep_job_synced_into_a_new_run_nests_under_its_parent(uri, client, tmp_path):
    """--new-run for a job whose MLflow run is gone: the new run is the sweep's child again."""
    from rlexp.tracking.spool import Link

    sweep_dir = tmp_path / "sweep"
    callback = SweepCallback()
    config = sweep_config(sweep_dir, uri)
    callback.on_multirun_start(config)
    child(uri, sweep_dir, 0.0)
    callback.on_multirun_end(config)
    job = sweep_dir / "beta0.0"
    (job / ".hydra").mkdir()
    (job / ".hydra" / "hydra.yaml").write_text("hydra:\n  job:\n    num: 0\n")
    link = Link.load(job)
    link.run_id = "0" * 32  # a run the store does not have (deleted for good)
    link.save(job)
    sync(job, new_run=True)
    new = client.get_run(run_id(job))
    assert new.data.tags["mlflow.parentRunId"] == parent_run_id(sweep_dir)
    # the tags the job's run had: its sweep, its index, its swept value in full
    assert (new.data.tags["sweep"], new.data.tags["rlexp.job_index"],
            new.data.tags["sweep.algo.beta"]) == ("sweep", "0", "0.0")


def test_parent_status_rules():
    assert parent_status(["FINISHED", "FINISHED"], completed=True) == "FINISHED"
    assert parent_status(["FINISHED", "KILLED"], completed=True) == "KILLED"
    assert parent_status(["KILLED", "FAILED"], completed=True) == "FAILED"
    assert parent_status(["FINISHED", "RUNNING"], completed=True) == "FAILED"
    assert parent_status(["FINISHED"], completed=False) == "FAILED"
    assert parent_status([], completed=True) == "FAILED"


def test_sweep_callback_is_silent_without_tracking(tmp_path):
    config = sweep_config(tmp_path / "sweep", "unused")
    config.tracker.name = "none"
    callback = SweepCallback()
    callback.on_multirun_start(config)
    callback.on_multirun_end(config)
    # only the sweep-dir lock (rlexp.lock): no parent run, no summary
    assert [p.name for p in (tmp_path / "sweep").iterdir()] == ["rlexp.lock"]


def test_import_is_light():
    """Hydra imports the callback for every run, the entry point imports rlexp.tracking."""
    import subprocess
    import sys

    code = ("import sys, rlexp.tracking, rlexp.tracking.callback, rlexp.base.redact; "
            "print('mlflow' in sys.modules, 'matplotlib' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         check=True, env={**environment(), "PYTHONWARNINGS": "ignore"})
    assert out.stdout.split() == ["False", "False"]


def test_spool_survives_a_torn_last_line(tmp_path):
    from rlexp.tracking.spool import Spool

    spool = Spool(tmp_path / SPOOL_FILE)
    spool.append({"kind": "metrics", "step": 1, "t": 1, "values": {"a": 1.0}})
    spool.close()
    with open(tmp_path / SPOOL_FILE, "a") as f:
        f.write('{"kind": "metr')  # the process died mid-write
    assert [r["step"] for r in Spool(tmp_path / SPOOL_FILE).read()] == [1]
    shutil.rmtree(tmp_path)


def test_a_store_prepared_in_the_background_is_whole_once_waited_for(tmp_path):
    """tracking.warm_up's thread makes a new sqlite store (schema and all) while the engine
    builds; wait_prepared (the listener's first act) returns once it is usable."""
    from rlexp.tracking import store

    db = tmp_path / "new" / "mlflow.db"
    uri = f"sqlite:///{db}"
    cfg = Config()
    cfg.tracker.uri = uri
    from rlexp.tracking import warm_up

    warm_up(cfg)
    store.wait_prepared(uri)
    assert uri in store._prepared and db.is_file()
    client = MlflowClient(uri)
    assert client.get_experiment(client.create_experiment("x")).name == "x"
    store.wait_prepared(uri)  # a second wait (or none started) returns at once


def _schema(db: Path) -> tuple[list, list]:
    """Tables and indexes with their columns and constraints, in an order of their own:
    MLflow's migrations emit a table's CHECK constraints in set order (differs run to run)."""
    import sqlite3

    with sqlite3.connect(db) as con:
        tables = sorted((kind, name, sorted(line.strip().rstrip(",") for line in sql.splitlines()))
                        for kind, name, sql in con.execute(
                            "SELECT type, name, sql FROM sqlite_master WHERE name NOT LIKE "
                            "'sqlite_%'").fetchall())
        rows = con.execute("SELECT version_num FROM alembic_version").fetchall()
    con.close()
    return tables, rows


def test_a_new_store_copied_from_the_schema_template_is_what_mlflow_migrates(tmp_path,
                                                                             monkeypatch):
    """A new sqlite store starts from a migrated, empty template (store._copy_schema): the
    same tables, indexes and alembic revision as a store MLflow builds migration by
    migration, and a Default experiment rooted in the new store's own artifact dir."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    from rlexp.tracking import store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    own = tmp_path / "own" / "mlflow.db"
    own.parent.mkdir()
    SqlAlchemyStore(f"sqlite:///{own}", str(tmp_path / "own" / "art")).engine.dispose()
    for name in ("first", "second"):  # the first makes the template, the second copies it
        db = tmp_path / name / "mlflow.db"
        store.ensure_store(f"sqlite:///{db}")
        assert store.schema_template().is_file()
        assert _schema(db) == _schema(own)
        default = MlflowClient(f"sqlite:///{db}").get_experiment("0")
        assert default.name == "Default"
        assert default.artifact_location == str(db.parent / "mlartifacts" / "0")
    client = MlflowClient(f"sqlite:///{tmp_path / 'second' / 'mlflow.db'}")
    run = client.create_run(client.create_experiment("x"))
    client.log_metric(run.info.run_id, "m", 1.5)
    assert client.get_run(run.info.run_id).data.metrics == {"m": 1.5}


def test_a_broken_schema_template_is_made_again(tmp_path, monkeypatch):
    """A template that is not a migrated sqlite store (torn, overwritten) is not copied: it
    is rebuilt, and the new store is whole."""
    from rlexp.tracking import store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = store.schema_template()
    template.parent.mkdir(parents=True)
    template.write_bytes(b"not a database")
    db = tmp_path / "s" / "mlflow.db"
    store.ensure_store(f"sqlite:///{db}")
    assert MlflowClient(f"sqlite:///{db}").get_experiment("0").name == "Default"
    assert store._usable(template)


def test_a_template_mlflow_refuses_leaves_the_store_to_mlflow(tmp_path, monkeypatch):
    """A template that looks whole but carries a revision MLflow does not know is tried
    under a temporary name only: the store is then migrated by MLflow, and nothing is left."""
    import sqlite3

    from rlexp.tracking import store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = store.schema_template()
    template.parent.mkdir(parents=True)
    with sqlite3.connect(template) as db:
        db.execute("CREATE TABLE alembic_version (version_num VARCHAR(32) NOT NULL)")
        db.execute("INSERT INTO alembic_version VALUES ('0000deadbeef')")
        db.execute("CREATE TABLE experiments (experiment_id INTEGER)")
    db.close()
    assert store._usable(template)
    db_path = tmp_path / "s" / "mlflow.db"
    store.ensure_store(f"sqlite:///{db_path}")
    client = MlflowClient(f"sqlite:///{db_path}")
    assert client.get_experiment("0").name == "Default"
    assert _schema(db_path)[1] != [("0000deadbeef",)]  # MLflow's own revision
    assert sorted(p.name for p in db_path.parent.iterdir()) == ["mlartifacts", "mlflow.db",
                                                                "mlflow.db.lock"]


def test_flock_is_taken_in_one_place():
    """Locks go through rlexp.base.lock (try_flock, flocked, DirLock)."""
    import rlexp

    src = Path(rlexp.__file__).parent
    users = sorted(str(p.relative_to(src)) for p in src.rglob("*.py")
                   if "fcntl.flock(" in p.read_text())
    assert users == ["base/lock.py"], users


# ------------------------------------------------------------------------------ links


def test_run_link_is_the_ui_page_when_a_server_is_known(tmp_path):
    from rlexp.tracking.links import announce_ui, run_link, withdraw_ui

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    # a store other than the default one: the command names it
    assert run_link(uri, "3", "abc") == \
        f"run abc in {uri} (open it with: python -m rlexp.ui --uri {uri})"
    assert run_link("http://mlflow.lab:5000/", "3", "abc") == \
        "http://mlflow.lab:5000/#/experiments/3/runs/abc?workflowType=machine_learning"
    announced = announce_ui(uri, "http://127.0.0.1:5123")  # rlexp.ui serves this store
    assert run_link(uri, "3", "abc") == \
        "http://127.0.0.1:5123/#/experiments/3/runs/abc?workflowType=machine_learning"
    withdraw_ui(announced)
    assert run_link(uri, "3", "abc").startswith("run abc in ")
    announced.write_text(json.dumps({"url": "http://127.0.0.1:5123", "pid": 2**22 + 7}))
    assert run_link(uri, "3", "abc").startswith("run abc in ")  # that UI is gone


def test_console_prints_the_run_dir_and_link_at_start_and_end(tmp_path):
    import io

    from rlexp.job.console import ConsoleListener

    out = io.StringIO()
    console = ConsoleListener(Config(), stream=out, terminal=False,
                              link=lambda: "http://127.0.0.1:5000/#/experiments/1/runs/r1")
    console.on_run_start(info(tmp_path / "run"))
    console.show_link()  # after the listeners started: the tracker made the run
    console.on_run_end("FINISHED", {"steps_done": 8, "wall_s": 3.0})
    text = out.getvalue()
    assert text.count(f"run dir  {tmp_path / 'run'}") == 2
    assert text.count("MLflow   http://127.0.0.1:5000/#/experiments/1/runs/r1") == 2
    assert text.index("finished after 8 steps") < text.rindex("MLflow   http")


# ------------------------------------------------------------------------------ rollouts


class Rollouts:
    def __init__(self):
        self.steps = []

    def on_rollouts(self, step, rows):
        self.steps.append(step)
        assert rows and {"prompt", "completion", "reward", "advantage", "length",
                         "truncated"} <= set(rows[0])

    def __getattr__(self, name):  # every other hook: nothing to record
        return lambda *a, **k: None


@pytest.mark.parametrize("every,tracker,expected", [
    (None, "mlflow", [2, 4, 6]),  # default: at each evaluation (eval.every=2; 6 = the end)
    (3, "mlflow", [3, 6]),
    (4, "mlflow", [4, 6]),      # and the last step's
    (0, "mlflow", []),
    (None, "none", []),         # nobody to keep them
])
def test_training_rollouts_reach_the_listeners(every, tracker, expected, tmp_path,
                                               monkeypatch):
    from fake_engine import FakeEngine, evaluate as fake_evaluate

    from rlexp.base.events import Listeners
    from rlexp.job import loop

    cfg = Config()
    cfg.train.steps, cfg.eval.every = 6, 2
    cfg.tracker.name, cfg.tracker.log_completions_every = tracker, every
    monkeypatch.setattr(loop, "evaluate", fake_evaluate)
    rec = Rollouts()
    loop.train_steps(cfg, FakeEngine(cfg, curve=lambda s: 0.1), Listeners([rec]), tmp_path)
    assert rec.steps == expected


# ------------------------------------------------------------------------------ rlexp.ui


def test_ui_on_a_taken_port_exits_2_naming_it(tmp_path):
    import socket
    import subprocess
    import sys

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        proc = subprocess.run([sys.executable, "-m", "rlexp.ui", "--port", str(port),
                               "--uri", f"sqlite:///{tmp_path / 'mlflow.db'}"],
                              capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2 and proc.stdout == ""
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and f"port {port}" in lines[0] and "--port" in lines[0], lines


def test_the_ui_index_keeps_the_model_training_view():
    from rlexp.tracking.ui import WORKFLOW_KEY, with_training_view

    page = with_training_view('<!doctype html><html><head><meta charset="utf-8"/></head>')
    head = page.index("<head>") + len("<head>")
    assert page[head:].startswith("<script>") and WORKFLOW_KEY in page
    assert page.index("</script>") < page.index("<meta")  # before the app's scripts load


@pytest.mark.slow
def test_a_single_run_prints_its_link_and_lasts_as_long_in_mlflow(tmp_path):
    """python -m rlexp on the scripted engine, whose build takes 2 s (as a warm start and a
    first compile do): the run dir and the MLflow run are printed at start and at the end,
    and the MLflow run's duration is summary.json's wall time (it started at the listener's
    start and ended before the job did)."""
    from fake_engine import sweep_env
    from sweep_helpers import explain, rlexp

    env = {**sweep_env(tmp_path), "RLEXP_FAKE_BUILD_S": "2"}
    proc = rlexp(["train.steps=3", "eval.every=1", "run.progress=false", "run.export=false"],
                 cwd=tmp_path, env=env, timeout=300)
    assert proc.returncode == 0, explain(proc)
    (run_dir,) = [p.parent for p in (tmp_path / "outputs").rglob("summary.json")
                  if "mlartifacts" not in p.parts]
    summary = json.loads((run_dir / "summary.json").read_text())
    rid = summary["mlflow_run_id"]
    out = proc.stdout + proc.stderr
    assert out.count(f"run {rid} in sqlite:///") == 2, explain(proc)
    assert out.count(f"run dir  {run_dir}") == 2
    run = MlflowClient(f"sqlite:///{tmp_path / 'outputs' / 'mlflow.db'}").get_run(rid)
    duration = (run.info.end_time - run.info.start_time) / 1000
    assert duration == pytest.approx(summary["wall_s"], rel=0.05), (duration, summary)
    assert summary["wall_s"] > 2.0


def test_a_steps_completions_and_reward_quantiles_read_back_through_mlflows_own_api(
        uri, client, tmp_path, monkeypatch):
    """One step's probe (rewards of two functions, the group advantages) through the listener:
    MLflow's load_table (what its UI's table view reads, by mlflow.loggedArtifacts) returns a
    row per completion with each function's reward, their sum and the advantage, and the
    step's reward quantiles are NumPy's of those sums (as observed on a real tiny run's
    rollouts/step_000002.json: prompt, completion, format_exact ... answer_close, reward,
    advantage, length, truncated)."""
    import numpy as np
    from tunix.rl.rollout.base_rollout import RolloutOutput

    from rlexp.algo.advantages import group_advantages
    from rlexp.engine.probes import QUANTILES, StepProbe

    fmt = np.array([0.5, 0.0, 0.5, 0.5, 0.0, 0.0, 0.5, 0.5])
    ans = np.array([1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 2.0])
    total = fmt + ans
    texts = [f"<answer>{i}</answer>" for i in range(8)]
    probe = StepProbe(num_generations=4, max_tokens=8)
    probe.record_reward("format_exact", list(fmt))
    probe.record_reward("answer_exact", list(ans))
    probe.record_generate(0.1, RolloutOutput(
        text=texts, logits=None, tokens=[np.ones(n) for n in (3, 8, 5, 4, 8, 2, 6, 7)],
        left_padded_prompt_tokens=np.ones((8, 4)), logprobs=None), pad_id=0)
    probe.record_prepare(0.1, ["1+1="] * 4 + ["2+2="] * 4, group_advantages(total, 4))
    run_dir = tmp_path / "run"
    listener = MlflowListener(uri, "completions", run_dir, gated=False, flush_every_s=0.1)
    listener.on_run_start(info(run_dir))
    listener.on_metrics(1, probe.metrics())
    listener.on_rollouts(1, probe.rows())
    listener.on_run_end("FINISHED", {"steps_done": 1})
    rid = run_id(run_dir)
    run = client.get_run(rid)

    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)  # load_table searches the fluent store
    table = client.load_table(run.info.experiment_id, "rollouts/step_000001.json",
                              run_ids=[rid])
    assert list(table.columns) == ["prompt", "completion", "format_exact", "answer_exact",
                                   "reward", "advantage", "length", "truncated"]
    assert list(table["completion"]) == texts and table["prompt"][4] == "2+2="
    np.testing.assert_allclose(table["format_exact"], fmt)
    np.testing.assert_allclose(table["reward"], total)
    np.testing.assert_allclose(table["advantage"], group_advantages(total, 4), atol=1e-6)
    assert list(table["truncated"]) == [False, True, False, False, True, False, False, False]
    got = run.data.metrics
    want = dict(zip([f"p{q}" for q in QUANTILES], np.percentile(total, QUANTILES)),
                min=total.min(), max=total.max())
    assert {k: got[f"train/reward_dist/{k}"] for k in want} == pytest.approx(want)
    # sorted 0 0 0 .5 .5 1.5 1.5 2.5: p90 at 0.9 x 7 = 6.3, between 1.5 and 2.5
    assert got["train/reward_dist/p90"] == pytest.approx(1.5 + 0.3 * (2.5 - 1.5))


def test_a_child_deleted_before_the_sweep_ends_still_ends_its_parent(uri, client, tmp_path):
    """publish_comparison tags each child with its group: one deleted in the UI meanwhile
    costs its tag, not the parent's end (it stayed RUNNING); a failed chart still ends it."""
    from rlexp.tracking import compare
    from rlexp.tracking.callback import publish_comparison

    exp = client.create_experiment("deleted-child", artifact_location=str(tmp_path / "art"))
    parent = client.create_run(exp).info.run_id
    rows = []
    for beta, accuracy in (("0", 0.2), ("0.04", 0.4)):
        child = client.create_run(exp, tags={"mlflow.parentRunId": parent}).info.run_id
        rows.append(compare.Row(name=f"beta{beta}", run_id=child, status="FINISHED",
                                values={"algo.beta": beta}, final_accuracy=accuracy,
                                final_reward=accuracy, steps=4))
    client.delete_run(rows[0].run_id)
    publish_comparison(client, parent, tmp_path, rows, "sweep t", "FINISHED")
    assert client.get_run(parent).info.status == "FINISHED"
    assert client.get_run(rows[1].run_id).data.tags["rlexp.group"]
    again = client.create_run(exp).info.run_id
    with pytest.raises(OSError):  # its directory is gone: no table, no chart
        publish_comparison(client, again, tmp_path / "gone", rows[1:], "sweep t", "FAILED")
    assert client.get_run(again).info.status == "FAILED"
