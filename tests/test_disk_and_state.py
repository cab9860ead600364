"""A full disk, and the state of a run that already ended (issue "Reliability round three",
items 1, 2 and part of 6).

Fast, without a JAX compile: full runs of rlexp.job.experiment.run in-process on the scripted
engine (tests/fake_engine.py) whose checkpoint save fails with a real OSError(ENOSPC) (or
orbax's RESOURCE_EXHAUSTED) half-way, pre-flight's free-space check with shutil.disk_usage's
answer patched, a finished run whose summary.json is damaged, sending the same MLflow inputs
and model output twice. With a real small filesystem (a tmpfs: needs mount, so root; `require`
says so): the issue's 5 MB disk with 420 KB free, refused at start.
Slow, with the real engine: orbax's own save failing on a full tmpfs mid-run, then resumed;
the issue's finished run with a truncated summary.json through the command line, then
`python -m rlexp.sync`."""

from __future__ import annotations

import ast
import errno
import json
import logging
import os
import shutil
import subprocess
import sys
import textwrap
from collections import namedtuple
from pathlib import Path

import pytest
from mlflow import MlflowClient

from conftest import require
from fake_engine import FakeEngine, JsonStore, evaluate as fake_evaluate
from helpers import cli, cli_env, history, one_line_exit_2
from rlexp.base.errors import UserError
from rlexp.engine.checkpoint_store import (DiskFull, disk_full, quiet_orbax_failures,
                                           unfinished)
from rlexp.tracking.spool import LINK_FILE

# test_reliability's RUN: the real runs of both files share one warm start and one set of
# compiled programs in the session's run cache.
RUN = ["train.batch_size=2", "algo.num_generations=2", "dataset.num_eval=4",
       "eval.num_samples=4", "eval.pass_k=2", "model.warm_start_steps=5", "run.progress=false",
       "train.steps=8"]
# Bytes of a checkpoint of the tiny model on disk (orbax 0.12, measured).
TINY_CHECKPOINT = 1_115_599


def _tracked(run_dir: Path) -> tuple[MlflowClient, str]:
    link = json.loads((run_dir / LINK_FILE).read_text())
    return MlflowClient(link["uri"]), link["run_id"]


def _left_behind(run_dir: Path) -> list[str]:
    """Half-written things: *.tmp files, orbax's unfinished saves, the disk reserve."""
    return [str(p.relative_to(run_dir)) for p in run_dir.rglob("*")
            if p.name.endswith(".tmp") or ".orbax-checkpoint-tmp" in p.name
            or p.name == ".rlexp-reserve"]


def _errors(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("rlexp: error:")]


# --------------------------------------------------------------- recognizing a full disk


def test_a_full_disk_is_recognized_in_the_forms_it_takes(tmp_path):
    ckpt = tmp_path / "checkpoints"
    found = disk_full(OSError(errno.ENOSPC, "No space left on device", str(tmp_path / "x")))
    assert isinstance(found, DiskFull) and found.path == str(tmp_path / "x")
    assert found.free is not None and "free)" in found.describe()
    # tensorstore under orbax: the file inside the unfinished save names the checkpoints dir
    orbax = ValueError(f'RESOURCE_EXHAUSTED: Error writing "w/0" in OCDBT database at local '
                       f'file "{ckpt}/4.orbax-checkpoint-tmp/model_params.orbax-checkpoint-tmp'
                       f'/ocdbt.process_0/": Failed to write 9 bytes to file 23: No space left '
                       f"on device [os_error_code='28']")
    assert disk_full(orbax).path == str(ckpt)
    try:  # anywhere in the chain
        try:
            raise OSError(errno.EDQUOT, "Disk quota exceeded")
        except OSError as exc:
            raise RuntimeError("write failed") from exc
    except RuntimeError as exc:
        assert disk_full(exc, tmp_path).path == str(tmp_path)
    # XLA's out-of-memory is RESOURCE_EXHAUSTED too, and not a disk
    assert disk_full(RuntimeError("RESOURCE_EXHAUSTED: Out of memory while trying to "
                                  "allocate 1.0G")) is None
    assert disk_full(OSError(errno.EACCES, "Permission denied")) is None


def test_the_plan_knows_a_checkpoint_size(compose_config):
    from rlexp.planning.plan import make_plan

    size = make_plan(compose_config()).checkpoint_bytes  # the tiny model
    assert TINY_CHECKPOINT <= size <= 1.5 * TINY_CHECKPOINT


# ------------------------------------------------------------ pre-flight: room for two


Usage = namedtuple("Usage", "total used free")


def test_preflight_refuses_a_disk_without_room_for_two_checkpoints(tmp_path, monkeypatch):
    from rlexp.launch.preflight import preflight

    monkeypatch.chdir(tmp_path)
    run_dir = tmp_path / "small" / "run"
    free = {"bytes": 2 * TINY_CHECKPOINT}  # less than two of the plan's (larger) estimate
    monkeypatch.setattr(shutil, "disk_usage", lambda path: Usage(10**9, 0, free["bytes"]))
    with pytest.raises(UserError) as refused:
        preflight([f"hydra.run.dir={run_dir}", "train.steps=2"])
    line = str(refused.value)
    assert f"hydra.run.dir={run_dir}" in line and "2.13 MiB free" in line
    assert "room for two" in line and "\n" not in line
    preflight([f"hydra.run.dir={run_dir}", "train.steps=2", "run.dry_run=true"])  # writes none
    free["bytes"] = 3 * TINY_CHECKPOINT
    assert preflight([f"hydra.run.dir={run_dir}", "train.steps=2"]).jobs
    assert not run_dir.exists()


@pytest.fixture
def small_disk(tmp_path):
    """A 5 MB tmpfs (a real small filesystem; mounting needs root), unmounted at the end."""
    where = tmp_path / "disk"
    where.mkdir()
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=5m", "tmpfs", str(where)],
                          capture_output=True, text=True)
    require(proc.returncode == 0, f"cannot mount a tmpfs ({proc.stderr.strip()})",
            "run the tests as root, or where mount -t tmpfs is allowed")
    yield where
    subprocess.run(["umount", "-l", str(where)], capture_output=True)


def _fill(where: Path, leave: int) -> Path:
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.posix_fallocate(fd, 0, shutil.disk_usage(where).free - leave)
    finally:
        os.close(fd)
    return filler


def test_the_issues_full_5mb_disk_is_refused_at_start_in_one_line(small_disk, tmp_path):
    _fill(small_disk, 420 * 1024)
    run_dir = small_disk / "run"
    proc = cli(*RUN, "train.checkpoint_every=1", f"hydra.run.dir={run_dir}",
               cwd=tmp_path, timeout=300)
    one_line_exit_2(proc, f"hydra.run.dir={run_dir}", "free", "room for two")
    assert sorted(p.name for p in small_disk.iterdir()) == ["filler"]  # nothing written


# ------------------------------------------------- a full disk mid-run (scripted engine)


class OrbaxLikeStore(JsonStore):
    """The scripted engine's store, plus the metadata file orbax writes in each step's dir
    (what a rerun reads without building an engine)."""

    def save(self, step: int, meta: dict) -> None:
        super().save(step, meta)
        (self.dir / str(step) / "_CHECKPOINT_METADATA").write_text(
            json.dumps({"custom_metadata": meta}, default=str))


class FullAtStep(OrbaxLikeStore):
    """The save of step FULL writes part of orbax's temporary dir, then the disk is full."""

    FULL = 4
    error = "enospc"

    def save(self, step: int, meta: dict) -> None:
        if step != self.FULL:
            return super().save(step, meta)
        partial = self.dir / f"{step}.orbax-checkpoint-tmp" / "model_params"
        partial.mkdir(parents=True)
        (partial / "d").write_bytes(b"\0" * 4096)
        if self.error == "enospc":
            raise OSError(errno.ENOSPC, "No space left on device", str(partial / "d"))
        raise ValueError(f'RESOURCE_EXHAUSTED: Error writing "w/0" in OCDBT database at local '
                         f'file "{partial}/": Failed writing: "{partial}/d": No space left on '
                         "device")


def _job(tmp_path: Path, monkeypatch, *overrides: str, store: type = OrbaxLikeStore,
         builds: list | None = None):
    """run() of one job on the scripted engine, in tmp_path (its store: outputs/mlflow.db)."""
    import rlexp.engine
    from rlexp.job import loop
    from rlexp.job.experiment import JobContext, run
    from rlexp.launch.preflight import preflight

    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(loop, "evaluate", fake_evaluate)
    monkeypatch.setattr(logging, "raiseExceptions", logging.raiseExceptions)  # a full disk sets it

    def build(cfg, plan, run_dir):
        engine = FakeEngine(cfg, curve=lambda s: 0.1 * s)
        engine.checkpoint_store = lambda directory, keep: store(directory, keep)
        if builds is not None:
            builds.append(run_dir)
        return engine

    monkeypatch.setattr(rlexp.engine, "build", build)
    (cfg,) = preflight(["train.steps=6", "train.checkpoint_every=2", "run.progress=false",
                        "run.export=false", *overrides]).jobs
    run_dir = tmp_path / "outputs" / "runs" / "job"
    run_dir.mkdir(parents=True, exist_ok=True)
    return run_dir, lambda: run(cfg, JobContext(run_dir=run_dir, name="job", choices={},
                                                overrides=list(overrides)))


@pytest.mark.parametrize("error", ["enospc", "resource_exhausted"])
def test_a_full_disk_mid_save_stops_failed_in_one_line_then_resumes(tmp_path, monkeypatch,
                                                                     capsys, error):
    monkeypatch.setattr(FullAtStep, "error", error)
    run_dir, start = _job(tmp_path, monkeypatch, store=FullAtStep)
    with pytest.raises(SystemExit) as stopped:
        start()
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    (line,) = _errors(err)
    assert "Traceback" not in err
    checkpoints = run_dir / "checkpoints"
    assert f"disk full writing {checkpoints} (" in line and " free)" in line
    assert "stopped after step 4" in line and "checkpoint (step 2) is kept" in line
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "FAILED" and summary["error"] == line.split("error: ", 1)[1]
    assert sorted(p.name for p in checkpoints.iterdir()) == ["0", "2"]  # the partial is gone
    assert _left_behind(run_dir) == []
    client, rid = _tracked(run_dir)
    assert client.get_run(rid).info.status == "FAILED"
    assert history(client, rid) == [1, 2]  # the steps the last good checkpoint covers

    # space returns; summary.json was damaged meanwhile: said in one line, the MLflow run
    # (FAILED) says the run did not finish, so it resumes from the last good checkpoint
    (run_dir / "summary.json").write_text('{"status": "FAI')
    run_dir, again = _job(tmp_path, monkeypatch)
    assert again() is not None
    err = capsys.readouterr().err
    assert f"MLflow run {rid} (FAILED) did not finish: it resumes" in err
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "FINISHED" and summary["resumed_from_step"] == 2
    assert history(client, rid) == [1, 2, 3, 4, 5, 6]  # each step once
    assert client.get_run(rid).info.status == "FINISHED"
    assert len(client.search_runs([client.get_run(rid).info.experiment_id])) == 1


def test_a_full_disk_in_a_listener_stops_the_run_at_that_step(tmp_path, monkeypatch, capsys):
    from rlexp.job import listeners

    real = listeners.ProgressFile.on_metrics

    def progress(self, step, metrics):
        if step == 3:  # progress.json's temporary file cannot be written
            self.path.with_suffix(".tmp").write_text('{"st')
            raise OSError(errno.ENOSPC, "No space left on device")
        real(self, step, metrics)

    monkeypatch.setattr(listeners.ProgressFile, "on_metrics", progress)
    run_dir, start = _job(tmp_path, monkeypatch)
    with pytest.raises(SystemExit) as stopped:
        start()
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    (line,) = _errors(err)
    assert "Traceback" not in err and "stopped after step 2" in line
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "FAILED"
    assert _left_behind(run_dir) == []
    client, rid = _tracked(run_dir)
    assert client.get_run(rid).info.status == "FAILED" and history(client, rid) == [1, 2]


def test_an_unfinished_save_of_a_killed_run_is_removed_when_the_dir_opens(tmp_path):
    from rlexp.job.resume import Checkpointer

    (tmp_path / "4").mkdir()
    (tmp_path / "6.orbax-checkpoint-tmp" / "model_params").mkdir(parents=True)
    engine = FakeEngine(None, curve=lambda s: 0.0)
    Checkpointer(tmp_path, 2, engine)
    assert unfinished(tmp_path) == [] and (tmp_path / "4").is_dir()


def test_orbax_noise_after_a_failed_save_is_dropped(monkeypatch, caplog):
    seen = []
    monkeypatch.setattr(sys, "unraisablehook", seen.append)
    quiet_orbax_failures()
    caplog.set_level(logging.INFO)
    logging.getLogger("absl").error("[process=0][thread=array_type_handler] _SignalingThread"
                                    ".run() raised an exception: RESOURCE_EXHAUSTED: ...")
    logging.getLogger("absl").warning("Attempted to create temporary directory /r/4.orbax-"
                                      "checkpoint-tmp which already exists. Removing ...")
    logging.getLogger("asyncio").error("Task exception was never retrieved\nfuture: <Task "
                                       "finished coro=<async_serialize_from_host() done, "
                                       "defined at /site-packages/orbax/checkpoint/...>")
    logging.getLogger("absl").error("something else went wrong")
    logging.getLogger("asyncio").error("Task exception was never retrieved\nfuture: <Task "
                                       "finished coro=<mine() done>")
    assert [r.getMessage()[:30] for r in caplog.records] == [
        "something else went wrong", "Task exception was never retri"]

    class Args:
        exc_type, exc_traceback, err_msg, object = RuntimeError, None, None, None
        exc_value = RuntimeError("Event loop is closed")  # tensorstore's late callbacks

    sys.unraisablehook(Args)
    Args.exc_value = ValueError("a real problem")
    sys.unraisablehook(Args)
    assert [a.exc_value for a in seen] == [Args.exc_value]


# ------------------------------------------------------------- a finished run's record


@pytest.mark.parametrize("tracker", ["mlflow", "none"])
def test_a_finished_run_with_a_damaged_summary_stays_finished(tmp_path, monkeypatch, capsys,
                                                              tracker):
    builds: list = []
    run_dir, start = _job(tmp_path, monkeypatch, f"tracker={tracker}", builds=builds)
    objective = start()
    first = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text((run_dir / "summary.json").read_text()[:40])
    capsys.readouterr()

    assert start() == pytest.approx(objective)
    out, err = capsys.readouterr()
    assert len(builds) == 1  # not built, not trained again
    assert f"{run_dir} already finished" in out
    (warning,) = [ln for ln in err.splitlines() if ln.startswith("rlexp: warning:")]
    assert "summary.json was damaged (kept as summary.json.damaged-" in warning
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "FINISHED" and summary["steps_done"] == 6
    assert summary["eval_after"] == first["eval_after"]
    assert len(list(run_dir.glob("summary.json.damaged-*"))) == 1
    if tracker == "none":
        assert "rebuilt from the final checkpoint (step 6)" in warning
        return
    client, rid = _tracked(run_dir)
    assert f"rebuilt from the MLflow run {rid} (FINISHED)" in warning
    assert summary["mlflow_run_id"] == rid and summary["started"] == first["started"]
    run = client.get_run(rid)
    assert run.info.status == "FINISHED" and run.info.end_time is not None
    sync = subprocess.run([sys.executable, "-m", "rlexp.sync", str(run_dir)], cwd=tmp_path,
                          env=cli_env(), capture_output=True, text=True, timeout=300)
    assert sync.returncode == 0, sync.stderr
    assert client.get_run(rid).info.status == "FINISHED"


# Calls that write (or move) a file: the receiver or an argument names the file.
WRITES = {"write_text", "write_bytes", "write_json_atomic", "replace", "rename", "copy",
          "copy2", "copyfile", "move"}


def _own_nodes(scope: ast.AST):
    """The nodes of a module or function, not those of the functions inside it."""
    todo = list(ast.iter_child_nodes(scope))
    while todo:
        node = todo.pop()
        yield node
        if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda)):
            todo.extend(ast.iter_child_nodes(node))


def summary_writes(source: str) -> list[int]:
    """Lines of `source` that write a file named by "summary.json" (a string holding it,
    SUMMARY_FILE, or a name its function assigned from either: `tmp = run_dir / "summary.json
    .tmp"; tmp.write_text(...)`)."""
    tree = ast.parse(source)
    hits = set()
    for scope in [tree, *(n for n in ast.walk(tree) if isinstance(n, ast.FunctionDef))]:
        named: set[str] = {"SUMMARY_FILE"}

        def names_it(node: ast.AST) -> bool:
            return any(isinstance(n, ast.Constant) and "summary.json" in str(n.value)
                       or isinstance(n, ast.Name) and n.id in named for n in ast.walk(node))

        own = list(_own_nodes(scope))
        for node in own:
            if isinstance(node, ast.Assign) and names_it(node.value):
                named |= {t.id for t in node.targets if isinstance(t, ast.Name)}
        for node in own:
            if not isinstance(node, ast.Call):
                continue
            func = node.func
            name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            mode = [a.value for a in node.args[1:2] if isinstance(a, ast.Constant)]
            writes = name in WRITES or (name == "open" and any(c in str(mode) for c in "wax"))
            parts = [*node.args, *(k.value for k in node.keywords)]
            if isinstance(func, ast.Attribute):
                parts.append(func.value)
            if writes and any(names_it(part) for part in parts):
                hits.add(node.lineno)
    return sorted(hits)


def test_one_module_writes_summary_json():
    # Positive controls: the two writers this replaced (job/experiment.py, tracking/sync.py).
    assert summary_writes(textwrap.dedent("""
        def write_summary(run_dir, summary):
            tmp = run_dir / "summary.json.tmp"
            tmp.write_text(json.dumps(summary))
            tmp.replace(run_dir / "summary.json")
        def fill(run_dir, summary):
            write_json_atomic(run_dir / SUMMARY_FILE, summary)
            with open(run_dir / "summary.json", "w") as handle:
                json.dump(summary, handle)
        """)) == [4, 5, 7, 8]
    assert summary_writes('s = json.loads((run_dir / "summary.json").read_text())') == []
    root = Path(__file__).resolve().parents[1]
    home = root / "src" / "rlexp" / "base" / "summary.py"
    assert summary_writes(home.read_text())  # the checker sees the one writer
    others = {str(path.relative_to(root)): summary_writes(path.read_text())
              for folder in ("src", "launchers") for path in sorted((root / folder).rglob("*.py"))
              if path != home}
    assert {path: lines for path, lines in others.items() if lines} == {}


# ------------------------------------------------------------------ the MLflow store


def test_inputs_and_the_model_output_sent_twice_are_no_error(uri, client, tmp_path):
    from rlexp.tracking.conventions import dataset_input
    from rlexp.tracking.run import TrackedRun, record
    from rlexp.tracking.spool import Link

    export = tmp_path / "export"
    export.mkdir()
    (export / "config.json").write_text("{}")
    inputs = [dataset_input("arith-train", "arith", "train", [{"question": "1+1"}])]
    run = TrackedRun(tmp_path, Link(uri=uri, experiment="twice"))
    for _ in range(2):  # a resend, or a rerun that exports again
        run.add(record("start", name="twice", tags={}, t=None))
        run.add(record("inputs", datasets=inputs))
        run.add(record("model", artifact_path="model", step=3))
        run.flush(float("inf"))
    got = client.get_run(run.link.run_id)
    assert len(got.inputs.dataset_inputs) == 1 and len(got.outputs.model_outputs) == 1
    run.close()


def test_a_param_the_store_refuses_costs_only_itself(uri, client, tmp_path):
    """MLflow params are write-once: a rerun that logs one with another value has its whole
    batch refused. The tags and the other params of the batch still reach the run; the refused
    param is dropped and named (TrackedRun.dropped, which the listener and rlexp.sync say)."""
    from rlexp.tracking.run import TrackedRun, record
    from rlexp.tracking.spool import Link

    run = TrackedRun(tmp_path, Link(uri=uri, experiment="write-once"))
    run.add(record("start", name="write-once", tags={}, t=None))
    run.add(record("params", params={"algo.beta": "0.04"}))
    run.flush(float("inf"))
    params = {f"p{i:03d}": str(i) for i in range(150)} | {"algo.beta": "0.08"}
    run.add(record("params", params=params))
    run.add(record("tags", tags={"note": "rerun"}))
    run.flush(float("inf"))
    got = client.get_run(run.link.run_id).data
    assert got.params == {f"p{i:03d}": str(i) for i in range(150)} | {"algo.beta": "0.04"}
    assert got.tags["note"] == "rerun"
    assert len(run.dropped) == 1 and run.dropped[0].startswith("param algo.beta='0.08': ")
    run.add(record("params", params={"algo.beta": "0.08"}))  # a resend meets it again
    run.flush(float("inf"))
    assert len(run.dropped) == 1
    run.close()


def test_a_store_that_refuses_a_write_is_not_called_unreachable(uri, tmp_path, capsys,
                                                                monkeypatch):
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import BAD_REQUEST

    from helpers import crash, info
    from rlexp.tracking.listener import MlflowListener
    from rlexp.tracking.run import TrackedRun

    listener = MlflowListener(uri, "refuses", tmp_path, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(tmp_path))

    def refuse(self, gate):
        raise MlflowException("(sqlite3.IntegrityError) UNIQUE constraint failed: inputs",
                              error_code=BAD_REQUEST)  # MLflow's word for an IntegrityError

    monkeypatch.setattr(TrackedRun, "flush", refuse)
    assert listener._write() is False
    err = capsys.readouterr().err
    assert "refused a write (MlflowException: (sqlite3.IntegrityError)" in err
    assert "unreachable" not in err
    crash(listener)


# ------------------------------------------------------------------ real runs (slow)


@pytest.mark.slow
def test_orbax_save_on_a_full_tmpfs_stops_cleanly_and_resumes(small_disk, tmp_path,
                                                               monkeypatch, capsys):
    """The real engine and orbax: the disk fills after step 2 with less room than a
    checkpoint (the free-space check before each save is switched off, so orbax itself
    runs out of space half-way through writing step 2)."""
    from rlexp.job import listeners
    from rlexp.job.experiment import JobContext, run
    from rlexp.job.resume import Checkpointer
    from rlexp.launch.preflight import preflight

    subprocess.run(["mount", "-o", "remount,size=24m", str(small_disk)], check=True)
    monkeypatch.chdir(tmp_path)
    monkeypatch.setattr(logging, "raiseExceptions", logging.raiseExceptions)
    real_check = Checkpointer._check_room
    monkeypatch.setattr(Checkpointer, "_check_room", lambda self: None)
    real = listeners.ProgressFile.on_metrics
    fillers = []

    def progress(self, step, metrics):
        real(self, step, metrics)
        if step == 2 and not fillers:
            fillers.append(_fill(small_disk, 600_000))

    monkeypatch.setattr(listeners.ProgressFile, "on_metrics", progress)
    (cfg,) = preflight([*RUN, "train.checkpoint_every=1",
                        f"hydra.run.dir={small_disk / 'run'}"]).jobs
    run_dir = small_disk / "run"
    run_dir.mkdir()
    job = JobContext(run_dir=run_dir, name="run", choices={}, overrides=[])
    with pytest.raises(SystemExit) as stopped:
        run(cfg, job)
    assert stopped.value.code == 1
    err = capsys.readouterr().err
    (line,) = _errors(err)
    assert "Traceback" not in err and "never retrieved" not in err, err[-3000:]
    assert f"disk full writing {run_dir / 'checkpoints'}" in line
    assert "checkpoint (step 1) is kept" in line
    assert sorted(p.name for p in (run_dir / "checkpoints").iterdir()) == ["0", "1"]
    assert _left_behind(run_dir) == []
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "FAILED"
    client, rid = _tracked(run_dir)
    assert client.get_run(rid).info.status == "FAILED"

    fillers[0].unlink()  # space returns
    monkeypatch.setattr(Checkpointer, "_check_room", real_check)
    run(cfg, job)
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "FINISHED" and summary["resumed_from_step"] == 1
    assert history(client, rid) == list(range(1, 9))
    assert client.get_run(rid).info.status == "FINISHED"


@pytest.mark.slow
def test_the_issues_finished_run_with_a_truncated_summary_through_the_cli(tmp_path):
    overrides = [*RUN, "train.checkpoint_every=4"]
    first = cli(*overrides, cwd=tmp_path, timeout=900)
    assert first.returncode == 0, first.stderr[-3000:]
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    client, rid = _tracked(run_dir)
    ended = client.get_run(rid).info.end_time
    text = (run_dir / "summary.json").read_text()
    (run_dir / "summary.json").write_text(text[:len(text) // 2])

    again = cli(*overrides, cwd=tmp_path, timeout=900)
    assert again.returncode == 0, again.stderr[-3000:]
    assert "already finished" in again.stdout and "resuming" not in again.stdout
    assert f"rebuilt from the MLflow run {rid} (FINISHED)" in again.stderr
    for bad in ("Traceback", "IntegrityError", "unreachable"):
        assert bad not in again.stdout + again.stderr
    run = client.get_run(rid)
    assert run.info.status == "FINISHED" and run.info.end_time == ended
    assert json.loads((run_dir / "summary.json").read_text())["status"] == "FINISHED"
    sync = subprocess.run([sys.executable, "-m", "rlexp.sync", str(run_dir)], cwd=tmp_path,
                          env=cli_env(), capture_output=True, text=True, timeout=300)
    assert sync.returncode == 0, sync.stderr
    assert client.get_run(rid).info.status == "FINISHED"
