"""Reliability. Fast, without training (no JAX compile: the `python -m rlexp` commands stop at
the lock or at pre-flight): the run/sweep-dir lock, damaged tracking state, one MLflow run per
run dir, summary fields, keep-N pruning, bad paths refused before anything is written.
Slow, with real `python -m rlexp` runs: SIGKILL and SIGTERM mid-run, rerun the same command,
nothing lost or doubled (one config for them all keeps each run short, see RUN)."""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from rlexp.base.errors import UserError
from rlexp.base.lock import LOCK_FILE, Busy, DirLock
from rlexp.tracking import prepare_store, run_id
from rlexp.tracking.listener import MlflowListener
from rlexp.tracking.spool import LINK_FILE, SPOOL_FILE, Spool
from helpers import cli, cli_env, crash, history, info, metrics, one_line_exit_2, said

# A process that takes a dir's lock the way a running job does, says so, then sleeps.
HOLDER = ("import sys, time; from rlexp.base.lock import DirLock; "
          "lock = DirLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(600)")


@pytest.fixture
def holder():
    """Start a process holding the lock of a dir; killed at the end of the test."""
    procs = []

    def hold(directory: Path) -> subprocess.Popen:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER, str(directory)],
                                stdout=subprocess.PIPE, text=True)
        procs.append(proc)
        assert proc.stdout.readline().strip() == "held"
        return proc

    yield hold
    for proc in procs:
        proc.kill()
        proc.wait()


def runs_of(client: MlflowClient, experiment: str) -> list:
    exp = client.get_experiment_by_name(experiment)
    return client.search_runs([exp.experiment_id]) if exp else []


# ---------------------------------------------------------------------------------- item 1


def test_a_held_dir_names_its_holder_and_a_dead_holder_holds_nothing(tmp_path, holder):
    proc = holder(tmp_path)
    with pytest.raises(Busy) as busy:
        DirLock(tmp_path).acquire()
    message = str(busy.value)
    assert f"pid {proc.pid} on {socket.gethostname()}" in message
    assert "since 20" in message and "\n" not in message
    proc.kill()
    proc.wait()  # SIGKILL: the lock file stays, the lock does not
    assert (tmp_path / LOCK_FILE).exists()
    with DirLock(tmp_path) as lock:
        assert lock.held
        assert json.loads((tmp_path / LOCK_FILE).read_text())["pid"] == os.getpid()
    DirLock(tmp_path).acquire().release()  # released: free again


def _listing(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime for p in root.rglob("*")}


def test_second_identical_command_exits_2_before_touching_anything(tmp_path, holder):
    run_dir = tmp_path / "outputs" / "runs" / "same"
    run_dir.mkdir(parents=True)
    proc = holder(run_dir)  # the first command, running in this dir
    (run_dir / "tracking_spool.jsonl").write_text("")  # what the first one already wrote
    before = _listing(run_dir)
    second = cli(f"hydra.run.dir={run_dir}", "train.steps=2", "run.progress=false",
                 cwd=tmp_path, timeout=300)
    one_line_exit_2(second, f"pid {proc.pid}")
    after = _listing(run_dir)
    # Hydra rewrites its own .hydra files and log before the job runs; rlexp writes nothing
    rlexp_files = {k: v for k, v in after.items()
                   if not k.startswith(".hydra") and not k.endswith(".log")}
    assert rlexp_files == {k: v for k, v in before.items() if k in rlexp_files}
    assert set(rlexp_files) == {LOCK_FILE, "tracking_spool.jsonl"}
    db = tmp_path / "outputs" / "mlflow.db"
    assert not db.exists() or not runs_of(MlflowClient(f"sqlite:///{db}"), "rlexp")


def test_second_identical_sweep_exits_2_before_any_job(tmp_path, holder):
    sweep_dir = tmp_path / "outputs" / "sweeps" / "same"
    proc = holder(sweep_dir)  # the first sweep, running
    second = cli("-m", f"hydra.sweep.dir={sweep_dir}", "train.steps=1,2", "run.progress=false",
                 "tracker=none", cwd=tmp_path, timeout=300)
    one_line_exit_2(second, f"pid {proc.pid}")
    assert [p.name for p in sweep_dir.iterdir()] == [LOCK_FILE]  # no job dir, no parent run


# ---------------------------------------------------------------------------------- item 3


@pytest.mark.parametrize("garbage", [b"\x00\xff garbage", b'{"uri": 5}', b"[1, 2]"])
def test_damaged_tracking_json_recovers_the_same_run(uri, client, tmp_path, capsys, garbage):
    experiment = f"damaged-{len(garbage)}-{garbage[:2].hex()}"
    run_dir = tmp_path / "run"
    first = MlflowListener(uri, experiment, run_dir, gated=True, flush_every_s=3600.0)
    first.on_run_start(info(run_dir))
    for step in range(1, 5):
        first.on_metrics(step, metrics(step))
    first.on_checkpoint(4, run_dir / "ckpt")
    assert first.flush(timeout=30)
    rid = run_id(run_dir)
    crash(first)
    (run_dir / LINK_FILE).write_bytes(garbage)

    second = MlflowListener(uri, experiment, run_dir, gated=True, flush_every_s=3600.0)
    second.on_run_start(info(run_dir, start_step=4))  # found by the run-dir tag in the store
    assert f"recovered MLflow run {rid}" in capsys.readouterr().err
    for step in range(5, 9):
        second.on_metrics(step, metrics(step))
    second.on_run_end("FINISHED", {})
    assert run_id(run_dir) == rid and len(runs_of(client, experiment)) == 1
    assert history(client, rid) == list(range(1, 9))
    assert client.get_run(rid).info.status == "FINISHED"
    assert list(run_dir.glob(f"{LINK_FILE}.damaged-*"))  # kept for a post-mortem


def test_damaged_tracking_json_recovers_from_the_summary_when_the_store_is_down(tmp_path,
                                                                                capsys):
    from rlexp.tracking.ui import free_port

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / LINK_FILE).write_text("{not json")
    (run_dir / "summary.json").write_text(json.dumps({"mlflow_run_id": "abc123"}))
    down = f"http://127.0.0.1:{free_port()}"
    listener = MlflowListener(down, "down", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir, start_step=2))
    assert "recovered MLflow run abc123 from summary.json" in capsys.readouterr().err
    crash(listener)
    assert run_id(run_dir) == "abc123"


def test_damaged_spool_records_are_skipped_counted_and_tracking_stays_on(uri, client, tmp_path,
                                                                         capsys):
    run_dir = tmp_path / "run"
    first = MlflowListener(uri, "bad-spool", run_dir, gated=True, flush_every_s=3600.0)
    first.on_run_start(info(run_dir))
    for step in range(1, 5):
        first.on_metrics(step, metrics(step))
    first.on_checkpoint(4, run_dir / "ckpt")
    rid = run_id(run_dir)
    crash(first)  # steps 1-4 still spooled (never flushed)
    with open(run_dir / SPOOL_FILE, "ab") as f:
        f.write(b'{"kind":"metrics"}\n' + bytes(range(11, 256)) + b"\n"
                + b'{"kind":"metrics","step":"x","t":1,"values":{}}\n')

    second = MlflowListener(uri, "bad-spool", run_dir, gated=True, flush_every_s=3600.0)
    second.on_run_start(info(run_dir, start_step=4))
    for step in range(5, 9):
        second.on_metrics(step, metrics(step))
    second.on_run_end("FINISHED", {})
    err = capsys.readouterr().err
    assert "skipped 3 damaged record(s)" in err
    assert "unreachable" not in err  # one bad line must not look like a dead store
    assert history(client, rid) == list(range(1, 9))
    assert client.get_run(rid).info.status == "FINISHED"


def test_spool_reader_validates_each_kind(tmp_path):
    path = tmp_path / SPOOL_FILE
    good = [{"kind": "metrics", "step": 1, "t": 5, "values": {"a": 1.0}},
            {"kind": "status", "status": "KILLED", "t": None}, {"kind": "curves"}]
    bad = [{"kind": "metrics", "step": True, "t": 5, "values": {}}, {"kind": 5},
           {"kind": "metrics", "step": 2, "t": 5, "values": {"a": "x"}}, {"kind": "artifact"},
           ["a", "list"], "text"]
    path.write_bytes(b"\n".join(json.dumps(r).encode() for r in good[:2] + bad + good[2:])
                     + b"\n\xc3\x28\n")
    spool = Spool(path)
    assert spool.read() == good and spool.skipped == len(bad) + 1


def test_sync_survives_bad_bytes_and_rebuilds_a_damaged_link(uri, client, tmp_path):
    from rlexp.tracking.sync import sync

    run_dir = tmp_path / "run"
    listener = MlflowListener(uri, "sync-bad", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir))
    rid = run_id(run_dir)
    for step in range(1, 4):
        listener.on_metrics(step, metrics(step))
    crash(listener)
    with open(run_dir / SPOOL_FILE, "ab") as f:
        f.write(b"\xff\xfe\x00 random bytes\n")
    (run_dir / LINK_FILE).write_bytes(b"\xff garbage")
    with pytest.raises(UserError, match="--uri"):
        sync(run_dir)
    message = sync(run_dir, uri=uri, experiment="sync-bad", send_all=True)
    assert "1 damaged spool records skipped" in message and "rebuilt" in message
    assert run_id(run_dir) == rid and history(client, rid) == [1, 2, 3]
    assert client.get_run(rid).info.status == "KILLED"  # crashed: nothing holds the lock


def test_sync_new_run_delivers_a_spool_whose_store_was_deleted(tmp_path):
    from rlexp.tracking.sync import main, sync

    old_store = tmp_path / "old" / "mlflow.db"
    old_uri = f"sqlite:///{old_store}"
    prepare_store(old_uri)
    run_dir = tmp_path / "run"
    listener = MlflowListener(old_uri, "lost", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir))
    old = run_id(run_dir)
    for step in range(1, 6):
        listener.on_metrics(step, metrics(step))
    listener.on_run_end("FINISHED", {"status": "FINISHED"})
    (run_dir / SPOOL_FILE).write_text("\n".join(json.dumps(
        {"kind": "metrics", "step": s, "t": 1000 + s, "values": {"train/loss": float(s)}})
        for s in (6, 7)) + "\n")  # what the store never got
    (run_dir / "summary.json").write_text(json.dumps(
        {"name": "run", "status": "FINISHED", "mlflow_run_id": old, "choices": {"algo": "grpo"}}))
    new_uri = f"sqlite:///{tmp_path / 'new' / 'mlflow.db'}"  # the old store is gone
    with pytest.raises(UserError, match="--new-run"):
        sync(run_dir, uri=new_uri)
    main([str(run_dir), "--uri", new_uri, "--new-run"])
    client = MlflowClient(new_uri)
    rid = run_id(run_dir)
    assert rid not in (None, old)
    run = client.get_run(rid)
    assert history(client, rid) == [6, 7]
    assert run.data.tags["rlexp.synced_from_run"] == old and run.data.tags["algo"] == "grpo"
    assert run.data.tags["rlexp.run_dir"] == str(run_dir.resolve())
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["mlflow_run_id"] == rid


# ---------------------------------------------------------------------------------- item 6


def test_crash_before_the_first_checkpoint_keeps_one_run(uri, client, tmp_path, capsys):
    """Gated: killed during the first save (step 0 never checkpointed): the rerun restarts
    from step 0 in the same run, with no extra empty KILLED run."""
    run_dir = tmp_path / "run"
    first = MlflowListener(uri, "first-save", run_dir, gated=True, flush_every_s=3600.0)
    first.on_run_start(info(run_dir))
    first.on_eval(0, {"eval/accuracy": 0.1}, [])
    rid = run_id(run_dir)
    crash(first)
    second = MlflowListener(uri, "first-save", run_dir, gated=True, flush_every_s=3600.0)
    second.on_run_start(info(run_dir))
    assert "restarts from step 0 in the same MLflow run" in capsys.readouterr().out
    second.on_eval(0, {"eval/accuracy": 0.1}, [])
    second.on_checkpoint(0, run_dir / "ckpt")
    for step in range(1, 5):
        second.on_metrics(step, metrics(step))
    second.on_run_end("FINISHED", {})
    assert run_id(run_dir) == rid and len(runs_of(client, "first-save")) == 1
    assert history(client, rid, "eval/accuracy") == [0] and history(client, rid) == [1, 2, 3, 4]
    assert client.get_run(rid).info.status == "FINISHED"


# ---------------------------------------------------------------------------------- item 7


def test_summary_of_a_rerun_keeps_what_the_earlier_attempt_knew():
    from rlexp.job.resume import carry_over

    earlier = {"status": "KILLED", "error": "preempted", "steps_done": 6, "wall_s": 50.0,
               "eval_before": {"eval/accuracy": 0.2}, "train_final": {"train/loss": 0.5},
               "mlflow_run_id": "r1", "engine": {"rollout": "vanilla"}}
    now = {"status": "KILLED", "error": "interrupted", "steps_done": 6, "wall_s": 3.0,
           "eval_before": {}, "mlflow_run_id": None, "objective": None}
    merged = carry_over(earlier, now)
    assert merged == {**now, "eval_before": {"eval/accuracy": 0.2},
                      "train_final": {"train/loss": 0.5}, "mlflow_run_id": "r1",
                      "engine": {"rollout": "vanilla"}}
    assert carry_over(None, now) == now
    assert carry_over(earlier, {**now, "mlflow_run_id": "r2"})["mlflow_run_id"] == "r2"


def test_sync_fills_the_summary_run_id(uri, client, tmp_path):
    from rlexp.tracking.sync import sync
    from rlexp.tracking.ui import free_port

    run_dir = tmp_path / "run"
    down = f"http://127.0.0.1:{free_port()}"
    listener = MlflowListener(down, "fill-id", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir))
    listener.on_metrics(1, metrics(1))
    summary = {"name": "run", "status": "FINISHED", "mlflow_run_id": None, "steps_done": 1}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    listener.on_run_end("FINISHED", summary)
    sync(run_dir, uri=uri)
    rid = run_id(run_dir)
    assert json.loads((run_dir / "summary.json").read_text())["mlflow_run_id"] == rid
    art = json.loads(Path(client.download_artifacts(rid, "summary.json", str(tmp_path)))
                     .read_text())
    assert art["mlflow_run_id"] == rid and art["steps_done"] == 1


def test_unusable_checkpoints_keep_the_newest(tmp_path):
    from rlexp.base.retention import prune_unusable

    for name in ("4", "6", "6.unusable-100", "6.unusable-300", "8.unusable-200", "2.unusable-50"):
        (tmp_path / name).mkdir()
    (tmp_path / "3.unusable-999").write_text("a file, not ours")
    removed = prune_unusable(tmp_path, keep=2)
    assert sorted(p.name for p in removed) == ["2.unusable-50", "6.unusable-100"]
    assert sorted(p.name for p in tmp_path.iterdir()) == \
        ["3.unusable-999", "4", "6", "6.unusable-300", "8.unusable-200"]


def test_warm_start_cache_keeps_the_entries_used_last(tmp_path):
    from rlexp.base.retention import STALE_TMP_S, mark_used, prune_cache

    now = time.time()
    for i, name in enumerate(["a", "b", "c", "d"]):
        (tmp_path / name).mkdir()
        (tmp_path / name / "params.npz").write_bytes(b"x")
        os.utime(tmp_path / name / "params.npz", (now - 1000 + i, now - 1000 + i))
    mark_used(tmp_path / "a" / "params.npz")  # loaded just now: the newest
    (tmp_path / "writing").mkdir()  # a job is writing this entry right now
    (tmp_path / "writing" / "params.123.tmp.npz").write_bytes(b"x")
    dead = tmp_path / "dead"  # a job killed while writing, long ago
    dead.mkdir()
    (dead / "params.9.tmp.npz").write_bytes(b"x")
    old = now - STALE_TMP_S - 10
    os.utime(dead / "params.9.tmp.npz", (old, old))
    os.utime(dead, (old, old))
    removed = prune_cache(tmp_path, keep=2, protect=tmp_path / "b")
    assert sorted(p.name for p in removed) == ["c", "dead"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a", "b", "d", "writing"]


# ------------------------------------------------------------------- bad input, non-finite


@pytest.mark.parametrize("bad,needle", [
    (["dataset=gsm8k", "dataset.path=/nonexistent/gsm8k.jsonl"], "dataset.path"),
    (["model=qwen3-0.6b", "model.path=/nonexistent/qwen"], "model.path"),
])
def test_bad_paths_exit_2_and_leave_nothing(tmp_path, bad, needle):
    proc = cli(*bad, cwd=tmp_path, env={"HF_DATASETS_OFFLINE": "1"}, timeout=300)
    one_line_exit_2(proc, needle)
    runs = tmp_path / "outputs" / "runs"
    assert not runs.exists() or not any(runs.iterdir())
    db = tmp_path / "outputs" / "mlflow.db"
    if db.exists():  # the store may exist, but holds no run of this command
        client = MlflowClient(f"sqlite:///{db}")
        assert not client.search_runs([e.experiment_id for e in client.search_experiments()])


def test_check_finite_names_the_bad_metric():
    from rlexp.job.loop import NonFinite, check_finite

    check_finite(3, {"train/loss": 0.5, "train/reward_mean": 1.0})
    with pytest.raises(NonFinite, match=r"step 3: train/loss=inf"):
        check_finite(3, {"train/loss": math.inf, "train/reward_mean": 1.0})
    with pytest.raises(NonFinite, match="train/reward/format_exact=nan"):
        check_finite(3, {"train/reward/format_exact": math.nan})


def test_a_failure_line_names_the_reward_its_exception_and_where_in_the_loop():
    from rlexp.data.rewards import RewardFailed, Term
    from rlexp.job.failure import failure_line
    from rlexp.job.loop import PhaseTimer, _note_where

    def grader(prompts, completions, answers, **_):
        raise ValueError("the grader is down\nsecond line")

    phase = PhaseTimer()
    with pytest.raises(RewardFailed) as raised:
        with phase("evaluate"):
            Term("exact", grader, 1.0)(["p"], ["c"], ["a"])
    assert isinstance(raised.value.__cause__, ValueError)  # the traceback keeps the original
    _note_where(raised.value, phase, 0)
    assert failure_line(raised.value) == ("reward exact raised ValueError: the grader is down "
                                          "in the evaluation at step 0")
    phase = PhaseTimer()
    with pytest.raises(OSError) as raised:
        with phase("step"):  # step 4's update: the counter still says 3
            raise OSError(5, "Input/output error", "/data/x.jsonl")
    _note_where(raised.value, phase, 3)
    assert failure_line(raised.value) == ("OSError: [Errno 5] Input/output error: "
                                          "'/data/x.jsonl' at step 4")


# ------------------------------------------------------- real runs killed and rerun (slow)

# Every real run of this file and test_disk_and_state's slow ones: the same model, batch,
# lengths and train.steps, so the session's run cache makes the warm start and each compiled
# program once for all of them: a cold run is ~2 minutes on a busy 2-core CPU, a warm one ~30 s, a step ~0.1 s.
# Tests differ in what does not compile: checkpoints, signals, the reward plug-in.
RUN = ["train.batch_size=2", "algo.num_generations=2", "dataset.num_eval=4",
       "eval.num_samples=4", "eval.pass_k=2", "model.warm_start_steps=5", "run.progress=false",
       "train.steps=8"]


def _overrides(*extra: str) -> list[str]:
    """RUN with `extra`, whose value wins for a key in both (a key given twice is refused)."""
    keys = {e.split("=", 1)[0] for e in extra}
    return [*(o for o in RUN if o.split("=", 1)[0] not in keys), *extra]


def _rerun(cwd: Path, overrides: list[str]) -> subprocess.CompletedProcess:
    proc = cli(*overrides, cwd=cwd, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return proc


def _run_dir(cwd: Path) -> Path:
    (run,) = (cwd / "outputs" / "runs").iterdir()
    return run


def _step(cwd: Path) -> int:
    try:
        return json.loads(next((cwd / "outputs" / "runs").glob("*/progress.json")).read_text())["step"]
    except (StopIteration, OSError, ValueError):
        return -1


def _start_and_signal(cwd: Path, overrides: list[str], at_step: int, sig: int) -> tuple[int, str]:
    proc = subprocess.Popen([sys.executable, "-m", "rlexp", *overrides], cwd=cwd, env=cli_env(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    deadline = time.monotonic() + 600
    while _step(cwd) < at_step:
        assert proc.poll() is None, proc.stdout.read()
        assert time.monotonic() < deadline, "the run never reached the step"
        time.sleep(0.02)
    proc.send_signal(sig)
    out, _ = proc.communicate(timeout=120)
    return proc.returncode, out


def _tracked(run_dir: Path) -> tuple[MlflowClient, str]:
    """The store and MLflow run a run dir's tracking.json names."""
    link = json.loads((run_dir / LINK_FILE).read_text())
    return MlflowClient(link["uri"]), link["run_id"]


@pytest.mark.slow
def test_sigkill_after_step_6_then_rerun_logs_every_step_once(tmp_path):
    """Killed between the checkpoints of steps 4 and 8: the steps after 4 that the first
    attempt logged are trained again, and logged once."""
    overrides = _overrides("train.checkpoint_every=4")
    code, out = _start_and_signal(tmp_path, overrides, 6, signal.SIGKILL)
    assert code == -signal.SIGKILL
    run_dir = _run_dir(tmp_path)
    _, first_id = _tracked(run_dir)

    _rerun(tmp_path, overrides)
    client, rid = _tracked(run_dir)
    assert rid == first_id
    assert history(client, rid) == list(range(1, 9))  # 8 consecutive steps, each exactly once
    evals = history(client, rid, "eval/accuracy")
    assert evals == sorted(set(evals)) and evals[0] == 0 and evals[-1] == 8
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "FINISHED" and summary["steps_done"] == 8
    assert summary["resumed_from_step"] >= 4
    assert client.get_run(rid).info.status == "FINISHED"


@pytest.mark.slow
def test_off_policy_sigkill_then_rerun_logs_every_step_once_with_its_staleness(tmp_path):
    """rollout.off_policy_steps=1 on the one CPU mesh: step n trains on a batch sampled before
    step n-1's update (staleness 1); step 1's and the first resumed step's batch (the one in
    flight at the kill, regenerated) are sampled with the weights they train (0)."""
    overrides = _overrides("train.checkpoint_every=2", "rollout.off_policy_steps=1")
    code, _ = _start_and_signal(tmp_path, overrides, 3, signal.SIGKILL)
    assert code == -signal.SIGKILL
    run_dir = _run_dir(tmp_path)
    _rerun(tmp_path, overrides)
    client, rid = _tracked(run_dir)
    assert history(client, rid) == list(range(1, 9))
    resumed = json.loads((run_dir / "summary.json").read_text())["resumed_from_step"]
    stale = {m.step: m.value for m in client.get_metric_history(rid, "rollout/staleness")}
    assert 2 <= resumed < 8
    assert stale == {s: float(s not in (1, resumed + 1)) for s in range(1, 9)}


@pytest.mark.slow
def test_sigkill_without_checkpoints_restarts_the_same_mlflow_run(tmp_path):
    """train.checkpoint_every=0: nothing to resume from, so the rerun trains from step 0 again,
    in the same MLflow run (one run per run dir), and logs no step twice (the same rule as
    test_crash_before_the_first_checkpoint_keeps_one_run, through a real killed process)."""
    overrides = _overrides("train.checkpoint_every=0", "tracker.flush_every_s=0.05")
    code, _ = _start_and_signal(tmp_path, overrides, 4, signal.SIGKILL)
    assert code == -signal.SIGKILL
    run_dir = _run_dir(tmp_path)
    _, first_id = _tracked(run_dir)
    rerun = _rerun(tmp_path, overrides)
    assert "restarts from step 0 in the same MLflow run" in rerun.stdout
    client, rid = _tracked(run_dir)
    assert rid == first_id and history(client, rid) == list(range(1, 9))
    assert len(client.search_runs([client.get_run(rid).info.experiment_id])) == 1
    assert client.get_run(rid).info.status == "FINISHED"


def _corrupt(checkpoint: Path) -> None:
    for f in checkpoint.rglob("*"):
        if f.is_file() and "model_params" in str(f):
            f.write_bytes(b"\0garbage")


@pytest.mark.slow
def test_sigterm_checkpoints_marks_killed_and_resumes_past_a_corrupt_checkpoint(tmp_path):
    overrides = _overrides("train.checkpoint_every=2")
    code, out = _start_and_signal(tmp_path, overrides, 3, signal.SIGTERM)
    assert code != 0, out[-2000:]
    run_dir = _run_dir(tmp_path)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "KILLED" and "SIGTERM" in summary["error"]
    client, rid = _tracked(run_dir)
    assert client.get_run(rid).info.status == "KILLED"
    steps = sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir() if p.name.isdigit())
    stopped_at = max(steps)
    assert summary["steps_done"] == stopped_at  # "killed after N steps", not "?"
    assert stopped_at >= 3  # saved at the step boundary where SIGTERM was seen
    _corrupt(run_dir / "checkpoints" / str(stopped_at))

    rerun = _rerun(tmp_path, overrides)
    assert "unusable" in rerun.stdout + rerun.stderr  # the corrupt one: skipped with a warning
    client, rid = _tracked(run_dir)
    assert history(client, rid) == list(range(1, 9))
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "FINISHED" and summary["resumed_from_step"] < stopped_at
    assert client.get_run(rid).info.status == "FINISHED"


@pytest.mark.slow
def test_nan_reward_stops_the_run_failed_and_keeps_the_checkpoint(tmp_path, monkeypatch):
    import importlib

    from rlexp.launch.preflight import preflight
    from rlexp.job.experiment import JobContext, run

    monkeypatch.chdir(tmp_path)
    (cfg,) = preflight(_overrides("train.checkpoint_every=2")).jobs
    calls: list[int] = []

    def nan_after_probe(prompts, completions, answers, **_):
        # Finite at the first step (pre-flight probed the real one), NaN from the second.
        calls.append(len(completions))
        return [0.0 if len(calls) == 1 else math.nan for _ in completions]

    # patched where the config names it (rlexp.rewards re-exports rlexp.data.rewards' function)
    (target,) = [f._target_ for f in cfg.reward.functions if f.name == "answer_close"]
    module, name = target.rsplit(".", 1)
    monkeypatch.setattr(importlib.import_module(module), name, nan_after_probe)
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
    client, rid = _tracked(run_dir)
    assert client.get_run(rid).info.status == "FAILED"


# ------------------------------------- failures after start-up: one line, FAILED, exit 1 (slow)

# A user's reward plug-in that passes its start-up probe (rlexp.data.rewards.probe: these three
# completions) and then fails: raises, or returns NaN.
FLAKY = '''
PROBE = ["<answer>5</answer>", "<answer>7</answer>", ""]

def raises(prompts, completions, answers, fail=True, **kwargs):
    if fail and list(completions) != PROBE:
        raise ValueError("the grader is down")
    return [0.0 for _ in completions]

def nan_later(prompts, completions, answers, **kwargs):
    return [0.0 if list(completions) == PROBE else float("nan") for _ in completions]
'''
FLAKY_PACKAGE = "rlexp_test_flaky"


@pytest.fixture(scope="module")
def flaky_env(tmp_path_factory) -> dict[str, str]:
    """PYTHONPATH with the FLAKY package importable, as if the user had installed it."""
    root = tmp_path_factory.mktemp("flaky")
    (root / FLAKY_PACKAGE).mkdir()
    (root / FLAKY_PACKAGE / "__init__.py").write_text("")
    (root / FLAKY_PACKAGE / "rewards.py").write_text(FLAKY)
    return {"PYTHONPATH": os.pathsep.join([str(root), *filter(None, [os.environ.get(
        "PYTHONPATH")])])}


def _reward(fn: str) -> str:
    return f"reward.functions=[{{_target_:{FLAKY_PACKAGE}.rewards.{fn},name:{fn}}}]"


def _ends_in_one_line(proc: subprocess.CompletedProcess, *needles: str) -> str:
    """Exit 1, no traceback, one `rlexp: error:` line holding every needle, and after it at
    most the run's dir and MLflow link (3 lines); returns the line."""
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "Error executing job" not in out, out[-3000:]
    assert "RuntimeWarning" not in out, out[-3000:]  # numpy's "Mean of empty slice" included
    lines = said(proc.stderr)
    errors = [i for i, ln in enumerate(lines) if ln.startswith("rlexp: error:")]
    assert len(errors) == 1, proc.stderr
    assert len(lines) - errors[0] <= 3, proc.stderr
    for needle in needles:
        assert needle in lines[errors[0]], lines[errors[0]]
    return lines[errors[0]]


def _failed_in_mlflow_with_traceback_in_log(run_dir: Path, *needles: str) -> None:
    client, rid = _tracked(run_dir)
    assert client.get_run(rid).info.status == "FAILED"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "FAILED"
    log = (run_dir / "rlexp.log").read_text()
    for needle in needles:
        assert needle in log, log[-3000:]


@pytest.mark.slow
def test_a_reward_plug_in_that_raises_mid_run_ends_in_one_line(tmp_path, flaky_env):
    proc = cli(*_overrides("model.warm_start_steps=0", _reward("raises")), cwd=tmp_path,
               env=flaky_env, timeout=900)
    line = _ends_in_one_line(proc, "reward raises raised ValueError: the grader is down",
                             "at step 0")
    assert line.endswith("in the evaluation at step 0"), line
    _failed_in_mlflow_with_traceback_in_log(_run_dir(tmp_path), "Traceback",
                                            "ValueError: the grader is down")


@pytest.mark.slow
def test_a_nan_reward_says_no_checkpoint_was_saved_and_no_numpy_warning(tmp_path, flaky_env):
    proc = cli(*_overrides("train.checkpoint_every=0", "model.warm_start_steps=0",
                           _reward("nan_later")), cwd=tmp_path, env=flaky_env, timeout=900)
    line = _ends_in_one_line(proc, "step 1: ", "train/reward/nan_later=nan",
                             "no checkpoint was saved (train.checkpoint_every=0)")
    assert "last good checkpoint" not in line
    run_dir = _run_dir(tmp_path)
    assert not any((run_dir / "checkpoints").iterdir())
    client, rid = _tracked(run_dir)
    assert client.get_run(rid).info.status == "FAILED"


@pytest.mark.slow
def test_a_sweep_with_a_failing_job_counts_it_says_its_line_and_exits_1(tmp_path, flaky_env):
    proc = cli("-m", *_overrides("model.warm_start_steps=0", _reward("raises"),
                                 "+reward.functions.0.kwargs.fail=true,false"),
               cwd=tmp_path, env=flaky_env, timeout=900)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 1, out[-3000:]
    assert "Traceback" not in out and "Error executing job" not in out, out[-3000:]
    (end,) = [ln for ln in proc.stdout.splitlines() if ln.startswith("rlexp: sweep ")]
    assert ": 1 of 2 runs FAILED; MLflow run " in end, end
    # the parent's last lines: the failed job's own line, labelled with its swept value
    last = said(proc.stderr)[-1]
    assert last.startswith("rlexp: error: [fail=True] reward raises raised ValueError: "
                           "the grader is down"), proc.stderr[-3000:]
    (sweep_dir,) = (tmp_path / "outputs" / "sweeps").iterdir()
    (failed,) = [p.parent for p in sweep_dir.glob("*/summary.json")
                 if json.loads(p.read_text())["status"] == "FAILED"]
    _failed_in_mlflow_with_traceback_in_log(failed, "Traceback", "the grader is down")
