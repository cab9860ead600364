"""One job, start to end: plan -> build -> listeners -> loop -> summary.json.

Data flows one way: config -> plan -> components -> loop -> listeners. This is the only place
that decides a run's status (FINISHED, FAILED, KILLED) and writes summary.json.

A rerun learns the earlier attempt's state from the first readable of: summary.json, the MLflow
run (tracking.json's id, else the run tagged rlexp.run_dir), the newest checkpoint (the loop's
last one carries `eval_after`). A damaged or missing summary.json of a run that finished is
said in one line and rebuilt from the others: the run is reported finished, never trained or
reopened again (its MLflow run stays FINISHED).

A full disk (ENOSPC, or orbax's RESOURCE_EXHAUSTED) anywhere during the run stops it FAILED with
one line naming the path and its free space: the unfinished checkpoint is removed (the last
good one stays), no *.tmp file is left, and a small reserve file, deleted first, leaves room
for summary.json and the tracker's final records.

A multi-controller run (hardware.runtime=multi_controller) runs this in every process: each
builds, trains, evaluates and checkpoints (orbax's multi-host save and restore, the device
collectives); process 0 alone writes summary.json, progress.json and the export, opens the
MLflow run and prints (rlexp.base.runtime.is_main_process).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from rlexp import engine as engine_lib
from rlexp.base import runtime
from rlexp.base.errors import UserError, fail
from rlexp.base.events import Listener, Listeners, RunInfo
from rlexp.base.lock import Busy, DirLock, is_lock_file
from rlexp.base.redact import redact_obj, redact_params, redact_text, redact_uri, scrub_run_dir
from rlexp.config.naming import flatten
from rlexp.config.schema import Config
from rlexp.engine import export
from rlexp.engine.checkpoint_store import DiskFull, disk_full, remove_unfinished
from rlexp.inputs import storage
from rlexp.inputs.storage import check_backend
from rlexp.job import loop, stopping
from rlexp.job.console import ConsoleListener, phase, quiet_third_party
from rlexp.job.resume import Checkpointer, Preempted, StopFlag, final_metadata
from rlexp.planning.hardware import init_distributed, lost_peer, process_lines, sync_processes
from rlexp.planning.plan import make_plan
from rlexp.tracking import default_uri, make_listener, parent_run_id, swept_keys, warm_up
from rlexp.tracking.callback import RemoteParentCloser
from rlexp.tracking.conventions import display_name, swept_tags
from rlexp.tracking.environment import git_tags, version_tags
from rlexp.tracking.listener import recorded_run
from rlexp.tracking.links import run_dir_link
from rlexp.tracking.remote_jobs import expected_jobs, parent_from_env

# Imported inside functions, on purpose: jax (1.4 s) is imported only to count devices at the end
# of a failed run: pre-flight and dry runs import this module.

log = logging.getLogger("rlexp")


@dataclass
class JobContext:
    # Where this job writes (Hydra's output dir).
    run_dir: Path
    # Readable run name (the run dir's name).
    name: str
    # Group choices, e.g. {"algo": "gspo", "hardware": "v6e-8", ...}.
    choices: dict[str, str]
    # The job's command-line overrides (a sweep job's include its swept values).
    overrides: list[str]
    # The sweep dir when this job is part of a multirun.
    sweep_dir: Path | None = None
    # The job's number in its multirun (Hydra's job.num, from 0); None for a single run.
    index: int | None = None

    @classmethod
    def from_hydra(cls) -> "JobContext":

        hc = HydraConfig.get()
        run_dir = Path(hc.runtime.output_dir)
        choices = {k: str(v) for k, v in OmegaConf.to_container(hc.runtime.choices).items()
                   if not k.startswith("hydra/") and v is not None}
        sweep = Path(hc.sweep.dir).resolve() if hc.mode == RunMode.MULTIRUN else None
        return cls(run_dir=run_dir, name=run_dir.name, choices=choices,
                   overrides=list(hc.overrides.task), sweep_dir=sweep,
                   index=int(hc.job.num) if sweep is not None else None)


def run_tags(cfg: Config, job: JobContext) -> dict[str, str]:

    tags = {"algo": cfg.algo.name, "model": cfg.model.name, "dataset": cfg.dataset.name,
            "hardware": cfg.hardware.name, "host": socket.gethostname(),
            "overrides": redact_text(" ".join(job.overrides)),
            "command": redact_text(" ".join([os.path.basename(sys.executable), "-m", "rlexp",
                                             *sys.argv[1:]])),
            **git_tags(), **version_tags()}
    if job.sweep_dir is not None:
        tags["sweep"] = job.sweep_dir.name
    if cfg.run.init_from:  # a fork names its origin (run dir, checkpoint or MLflow run id)
        tags["rlexp.init_from"] = cfg.run.init_from
    return tags


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except (OSError, ValueError):
        return None


def write_summary(run_dir: Path, summary: dict) -> None:
    if not runtime.is_main_process():  # one record per run: process 0 writes it
        return

    tmp = run_dir / "summary.json.tmp"
    try:
        tmp.write_text(json.dumps(redact_obj(json.loads(json.dumps(summary, default=str))),
                                  indent=2))
        tmp.replace(run_dir / "summary.json")  # atomic: readers never see half a file
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk: no half-written file stays
        raise

# Fields that describe one attempt: never taken from an earlier attempt's summary.
ATTEMPT_FIELDS = ("status", "error", "wall_s", "started", "steps_done", "resumed_from_step")


def carry_over(previous: dict | None, summary: dict) -> dict:
    """A rerun's summary keeps what the earlier attempt knew and this one does not (a rerun
    killed at once has no metrics of its own): a rewritten summary.json, and the MLflow
    artifact made from it, never lose results to an emptier one."""
    if not isinstance(previous, dict):
        return summary
    empty = (None, {}, [], "")
    out = dict(summary)
    for key, value in previous.items():
        if key not in ATTEMPT_FIELDS and out.get(key) in empty and value not in empty:
            out[key] = value
    return out


def warn(message: str) -> None:
    print(f"rlexp: warning: {message}", file=sys.stderr, flush=True)


def recorded_state(cfg: Config, job: JobContext, checkpoints: Any) -> dict | None:
    """The earlier attempt's summary: summary.json, else the MLflow run, else the newest
    checkpoint (None: a new run, or one that stopped before its end and resumes). A damaged
    summary.json is set aside; a finished run's is rebuilt and written again, in one line."""
    path = job.run_dir / "summary.json"
    previous = _read_json(path)
    if isinstance(previous, dict):
        return previous
    damaged = path.exists()
    final = final_metadata(checkpoints)
    if not damaged and final is None:
        return None  # no summary and training not done: a crash, the resume redoes the rest
    recorded = None
    if cfg.tracker.name == "mlflow":
        recorded = recorded_run(default_uri(cfg), cfg.tracker.experiment, job.run_dir)
    what = f"{path} is missing"
    if damaged:
        aside = path.with_name(f"summary.json.damaged-{int(time.time())}")
        os.replace(path, aside)  # kept for a post-mortem
        what = f"{path} was damaged (kept as {aside.name})"
    if recorded is not None:
        rebuilt = _summary_from_mlflow(recorded, job, final)
        source = f"MLflow run {recorded['run_id']} ({recorded['status']})"
    elif damaged and final is not None:
        rebuilt = _summary_from_checkpoint(final, job)
        source = f"final checkpoint (step {final.get('step')})"
    else:
        if damaged:
            warn(f"{what}; neither the MLflow run nor a final checkpoint says the run "
                 "finished: it resumes")
        return None
    if rebuilt.get("status") == "FINISHED":
        write_summary(job.run_dir, rebuilt)
        warn(f"{what}; rebuilt from the {source}")
    elif damaged:
        warn(f"{what}; the {source} did not finish: it resumes")
    return rebuilt


def _summary_from_mlflow(recorded: dict, job: JobContext, final: dict | None) -> dict:
    """summary.json as the MLflow run has it (its artifact), else from the run's fields."""
    summary = dict(recorded.get("summary") or {})
    status = recorded["status"]
    if not summary:
        start, end = recorded.get("start_time"), recorded.get("end_time")
        steps = recorded.get("tags", {}).get("rlexp.steps_done")
        summary = {"started": start / 1000 if start else None,
                   "wall_s": (end - start) / 1000 if start and end else None,
                   "steps_done": int(steps) if str(steps).isdigit() else
                   (final or {}).get("step"),
                   "objective": recorded.get("metrics", {}).get("eval/accuracy")}
        if final is not None:
            summary.update(eval_before=final.get("eval_before"),
                           eval_after=final.get("eval_after"))
    summary.update(_identity(job), status=status, mlflow_run_id=recorded["run_id"],
                   rebuilt_from=f"MLflow run {recorded['run_id']}")
    if status == "FINISHED":
        summary["error"] = None
    return summary


def _summary_from_checkpoint(final: dict, job: JobContext) -> dict:
    """A finished run's summary from its final checkpoint's metadata (the loop's last save)."""
    eval_after = final.get("eval_after") or {}
    link = _read_json(job.run_dir / "tracking.json") or {}
    return {**_identity(job), "status": "FINISHED", "error": None,
            "steps_done": final.get("step"), "eval_before": final.get("eval_before") or {},
            "eval_after": eval_after, "objective": eval_after.get("eval/accuracy"),
            "mlflow_run_id": link.get("run_id") if isinstance(link, dict) else None,
            "rebuilt_from": f"checkpoint {final.get('step')}"}


def _identity(job: JobContext) -> dict:
    return {"name": job.name, "choices": job.choices, "overrides": job.overrides,
            "run_dir": str(job.run_dir.resolve())}


def _forget_previous(run_dir: Path) -> None:
    """run.resume=false: the old checkpoints, tracking link and summary no longer apply."""
    for name in ("checkpoints", "tracking.json", "tracking_spool.jsonl", "summary.json"):
        path = run_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def print_plan(cfg: Config, plan, job: JobContext) -> None:

    print("rlexp plan (dry run: nothing compiled)")
    for line in plan.lines:
        print(f"  {line}")
    for line in process_lines(cfg.hardware):  # hosts x devices per host, who logs, host RAM
        print(f"  {line}")
    print(f"  outputs    {job.run_dir}")

    print(f"  tracking   {redact_uri(default_uri(cfg) or 'off (tracker=none)')}"
          f" experiment={cfg.tracker.experiment}")


def run(cfg: Config, job: JobContext) -> float | None:

    plan = make_plan(cfg)
    if cfg.run.dry_run:
        print_plan(cfg, plan, job)
        if not plan.fits:
            _user_error(plan.why, job)
        return None
    if not plan.fits:
        _user_error(plan.why, job)
    try:
        init_distributed(cfg.hardware)  # multi_controller: join the others (0 of 1 otherwise)
    except UserError as exc:
        _user_error(str(exc), job)
    lock = _lock_run_dir(job)  # before rlexp writes anything: a second identical command exits 2
    try:
        with runtime.frozen_heap():
            return _run_locked(cfg, job, plan)
    except Exception as exc:  # a full disk before training (the warm-start cache, a log)
        full = disk_full(exc, job.run_dir)
        if full is None:
            raise
        _stop_disk_full(job, f"{full.describe()}: free some space, then rerun the same command")
    finally:
        lock.release()


def _stop_disk_full(job: JobContext, line: str) -> "NoReturn":  # noqa: F821
    logging.raiseExceptions = False  # log files on that disk: no "--- Logging error ---"
    _remove_tmp_files(job.run_dir)
    if job.sweep_dir is not None:
        raise JobStopped(line)
    print(f"rlexp: error: {line}", file=sys.stderr, flush=True)
    sys.exit(1)


def _remove_tmp_files(run_dir: Path) -> None:
    """Temporary files a write that hit a full disk left (summary.json.tmp, progress.tmp,
    tracking.json.<pid>.<thread>.tmp, tracking_spool.jsonl.tmp)."""
    for path in run_dir.glob("*.tmp") if run_dir.is_dir() else ():
        try:
            path.unlink()
        except OSError:
            pass


def _lock_run_dir(job: JobContext) -> "DirLock":  # noqa: F821

    try:
        return DirLock(job.run_dir, process=runtime.process_index()).acquire()
    except Busy as exc:
        if job.sweep_dir is None:

            fail(str(exc))
        raise  # in a sweep: this job fails without touching the dir; the summary is the owner's


def _run_locked(cfg: Config, job: JobContext, plan) -> float | None:
    quiet_libraries()
    run_dir = job.run_dir
    # <run dir>/checkpoints, or <run.output_uri>/<run name>/checkpoints (gs://: orbax writes it)
    checkpoints = storage.checkpoint_dir(cfg.run.output_uri, run_dir, job.name)
    previous = None
    if cfg.run.resume:
        previous = recorded_state(cfg, job, checkpoints)
        if previous and previous.get("status") == "FINISHED":
            if runtime.is_main_process():
                print(already_finished(run_dir, previous, git_tags()))
            return previous.get("objective")
    else:
        if runtime.is_main_process():
            _forget_previous(run_dir)
        sync_processes("rlexp.forget_previous")  # no process restores what process 0 removes

    if runtime.is_main_process():
        scrub_run_dir(run_dir)
    started = time.time()
    # The first line of a run, before JAX is imported (the build's first seconds).
    phase(f"{job.name}: building the model (importing JAX and Tunix)")
    if runtime.is_main_process():
        warm_up(cfg)  # MLflow's import and store open on a thread, while the engine builds
    try:
        check_backend(cfg.run.output_uri)  # here, not in pre-flight: a launching machine
        engine = engine_lib.build(cfg, plan, run_dir)  # (xpk) needs no gcsfs
    except UserError as exc:  # bad input found while building: nothing was tracked yet
        _user_error(str(exc), job)
    except Exception as exc:
        if job.sweep_dir is not None:  # the sweep summary shows this job FAILED, with why
            _failed_summary(job, _error_line(exc))
        raise

    checkpointer = Checkpointer(checkpoints, cfg.train.keep_checkpoints, engine,
                                plan.checkpoint_bytes)
    resumed = checkpointer.restore_latest(cfg.train.seed) if cfg.run.resume else None
    engine.start_step = resumed["step"] if resumed else 0
    listener_list = _listeners(cfg, run_dir)
    progress = listener_list[0]  # the last step this attempt reached (KILLED/FAILED summaries)
    listeners = Observers(listener_list, run_dir)
    # + the engine's parameter counts (params/total, params/trainable: model.lora trains less)
    counts = {k: v for k, v in engine.info.items() if k.startswith("params/")}
    info = RunInfo(name=job.name, run_dir=run_dir, params=redact_params({**flatten(cfg), **counts}),
                   tags=run_tags(cfg, job), start_step=engine.start_step,
                   total_steps=cfg.train.steps, sweep_dir=job.sweep_dir,
                   extra={**_parent(job), "resumed": resumed is not None,
                          "started": started,  # the tracker's run starts when the job did
                          **_display(cfg, job, engine)})
    summary: dict[str, Any] = {
        "name": job.name, "status": "RUNNING", "choices": job.choices,
        "overrides": job.overrides, "run_dir": str(run_dir.resolve()),
        "devices": _device_count(), "started": started, "resumed_from_step": engine.start_step,
        # The code that produced the run ("already finished" names it on a rerun).
        **{k.replace(".", "_"): v for k, v in git_tags().items()},
    }
    status, error = "FAILED", None
    full: DiskFull | None = None
    lost: str | None = None  # a multi-controller run lost one of its processes

    stops = stopping.build(cfg.train.early_stop, cfg.train.prune, job.sweep_dir, job.name)
    reserve = DiskReserve(run_dir if runtime.is_main_process() else None)
    try:
        with StopFlag() as stop:
            listeners.on_run_start(info)
            for console in listener_list:  # run dir and MLflow link, once the run exists
                if isinstance(console, ConsoleListener):
                    console.show_link()
            summary.update(loop.run(cfg, engine, listeners, run_dir, checkpointer=checkpointer,
                                    stop=stop, resumed=resumed, stops=stops))
        status = "FINISHED"
        if cfg.run.export:
            summary["export"] = _export(cfg, engine, run_dir, listeners)
    except Preempted as exc:
        status, error = "KILLED", f"preempted (SIGTERM) after {exc}: rerun the command to resume"
    except KeyboardInterrupt:
        status, error = "KILLED", "interrupted"
    except loop.NonFinite as exc:
        error = str(exc)
    except Exception as exc:
        full = disk_full(exc, run_dir)
        lost = lost_peer(exc) if full is None else None
        if full is None and lost is None:
            error = _error_line(exc)
            raise
        error = lost or _disk_full_line(full, max(engine.start_step, progress.step), checkpointer)
    finally:
        if full is not None:
            logging.raiseExceptions = False  # log files on that disk: no "--- Logging error ---"
        reserve.release()  # room for the last words below
        if lost is None:  # orbax's close waits for every process: not for a lost one
            checkpointer.close()
        tracking = _read_json(run_dir / "tracking.json") or {}
        eval_after = summary.get("eval_after") or {}
        summary.update(status=status, error=error, wall_s=round(time.time() - started, 3),
                       mlflow_run_id=tracking.get("run_id"),
                       objective=eval_after.get("eval/accuracy"))
        summary.setdefault("steps_done", max(engine.start_step, progress.step))
        summary = carry_over(previous if cfg.run.resume else None, summary)
        try:
            write_summary(run_dir, summary)
        except OSError as exc:
            late = disk_full(exc, run_dir)
            if late is None:
                raise
            full = full or late
            if status == "FINISHED":  # trained, but not recorded: the rerun only writes it
                status, error = "FAILED", (f"{late.describe()}: summary.json not written; "
                                           "free some space, then rerun the same command")
                summary.update(status=status, error=error)
        if runtime.is_main_process():
            storage.mirror_outputs(cfg.run.output_uri, job.name, run_dir)  # run.output_uri only
        listeners.on_run_end(status, summary)
        stops.finish(status, summary)
        if full is not None:
            remove_unfinished(checkpoints)
            _remove_tmp_files(run_dir)
    if status != "FINISHED":  # KILLED (SIGTERM) or a clean stop (NaN/Inf)
        if job.sweep_dir is not None:  # never exit inside a sweep: the other jobs go on
            raise JobStopped(error)
        if lost is not None:  # every survivor says it; exit now: jax.distributed's shutdown
            print(f"rlexp: error: {error}", file=sys.stderr, flush=True)  # would wait for
            runtime.exit_at_once(1)  # the lost process, then abort
        if runtime.is_main_process():
            print(f"rlexp: {'error: ' if status == 'FAILED' else ''}{error}", file=sys.stderr)
        sys.exit(143 if status == "KILLED" else 1)
    return summary["objective"]


def _export(cfg: Config, engine: Any, run_dir: Path, listeners: Listeners) -> str | None:
    """The final policy as a Hugging Face dir, handed to the tracker as artifact `model`.
    Never fails the run: the checkpoint holds the same weights (python -m rlexp.export)."""

    try:
        source = Path(cfg.model.path) if cfg.model.path else None
        state = engine.policy_state()  # every process: gathering the shards is a collective
        if not runtime.is_main_process():
            return None
        out = export.write(run_dir / export.EXPORT_DIR, state, cfg.model, source)
    except Exception as exc:
        log.warning("export failed (%s); retry with: python -m rlexp.export %s",
                    _error_line(exc), run_dir)
        return None
    listeners.on_artifact(out, "model")
    return str(out)


def already_finished(run_dir: Path, previous: dict, git: dict[str, str]) -> str:
    """A rerun of a finished command: which code finished it, and how to train again.
    The run's identity is its config, not the code: a resume after a code change must
    find its run dir, so a finished one is reported, not silently redone."""
    when = time.strftime("%Y-%m-%d %H:%M", time.localtime(previous["started"] + previous.get(
        "wall_s", 0))) if isinstance(previous.get("started"), (int, float)) else "earlier"
    then, now = previous.get("git_commit"), git.get("git.commit")
    by = f" by commit {then[:10]}" if then and then != "unknown" else ""
    changed = ""
    if then and now and "unknown" not in (then, now) and then != now:
        changed = f"; the code is now at {now[:10]}"
    elif previous.get("git_dirty") == "true" or git.get("git.dirty") == "true":
        changed = "; the checkout has uncommitted changes"
    return (f"rlexp: {run_dir} already finished {when}{by}{changed}: add run.resume=false "
            "to train it again (its checkpoints and summary are replaced)")


class JobStopped(Exception):
    """A job of a sweep was killed or stopped cleanly; Hydra records it as failed."""


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def _failed_summary(job: JobContext, error: str) -> None:
    if not runtime.is_main_process():
        return
    job.run_dir.mkdir(parents=True, exist_ok=True)
    write_summary(job.run_dir, {"name": job.name, "status": "FAILED", "error": error,
                                "choices": job.choices, "overrides": job.overrides,
                                "run_dir": str(job.run_dir.resolve()), "objective": None})


def _device_count() -> int:
    import jax

    return jax.device_count()


def _user_error(message: str, job: JobContext) -> "NoReturn":  # noqa: F821
    if job.sweep_dir is None:

        _remove_if_empty(job.run_dir)
        fail(message)
    _failed_summary(job, message)
    raise UserError(message)  # in a sweep: this job fails, the others go on


def _remove_if_empty(run_dir: Path) -> None:
    """Bad input found after Hydra made the run dir: leave nothing half-made behind."""
    hydra_only = {".hydra", "rlexp.log", "__main__.log", "rlexp.lock", RESERVE_FILE}
    if run_dir.is_dir() and all(p.name in hydra_only or is_lock_file(p.name)
                                for p in run_dir.iterdir()):
        shutil.rmtree(run_dir, ignore_errors=True)


class ProgressFile(Listener):
    """run_dir/progress.json: the latest step, for schedulers, watchdogs and the resume bench."""

    def __init__(self, run_dir: Path, write: bool = True):
        self.path = run_dir / "progress.json"
        # Latest step whose metrics were emitted by this process (-1: none yet).
        self.step = -1
        # False: count steps only (processes other than 0 of a multi-controller run).
        self.write = write

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.step = step
        if not self.write:
            return
        tmp = self.path.with_suffix(".tmp")
        try:
            tmp.write_text(json.dumps({"step": step, "time": time.time()}))
            tmp.replace(self.path)
        except OSError:
            tmp.unlink(missing_ok=True)
            raise


class Muted:
    """A listener that hears nothing: the console of a process other than 0 (every hook,
    whatever its name, does nothing)."""

    def __getattr__(self, name: str) -> Any:
        return lambda *args, **kwargs: None


class Observers(Listeners):
    """The run's listeners: a failing one is logged and the run goes on (Listeners), except
    for a full disk, which stops the run now (Observers re-raise it as DiskFull once every
    listener had the event): nothing more could be saved, and the steps after the last good
    checkpoint are produced again by the resume."""

    def __init__(self, listeners: list[Listener], run_dir: Path):
        super().__init__(listeners)
        self.run_dir = run_dir

    def _each(self, hook: str, *args: Any, **kwargs: Any) -> None:
        full = None
        for listener in self.listeners:
            try:
                getattr(listener, hook)(*args, **kwargs)
            except Exception as exc:  # observers must never stop training, but for a full disk
                found = disk_full(exc, self.run_dir) if hook != "on_run_end" else None
                if found is None:
                    log.warning("%s.%s failed: %s", type(listener).__name__, hook, exc)
                full = full or found
        if full is not None:
            raise full


# A file keeping this much of the run dir's disk while the run trains: deleted when the run
# ends, so a disk that filled up meanwhile still takes summary.json and the tracker's last
# records (a few KiB; the rest is margin).
RESERVE_FILE = ".rlexp-reserve"
RESERVE_BYTES = 512 * 1024


class DiskReserve:
    def __init__(self, run_dir: Path | None):
        self.path = run_dir / RESERVE_FILE if run_dir is not None else None
        if self.path is None:  # a process other than 0 writes nothing to keep room for
            return
        try:
            with open(self.path, "wb") as handle:
                os.posix_fallocate(handle.fileno(), 0, RESERVE_BYTES)  # blocks, not a hole
        except (OSError, AttributeError):  # no room (pre-flight would have said) or no API
            self.release()

    def release(self) -> None:
        if self.path is None:
            return
        try:
            self.path.unlink(missing_ok=True)
        except OSError:
            pass


def _disk_full_line(full: DiskFull, step: int, checkpointer: Checkpointer) -> str:
    last = checkpointer.last_good()
    kept = (f"the last good checkpoint (step {last}) is kept" if last is not None
            else "no checkpoint was saved yet")
    return (f"{full.describe()}: stopped after step {step}; {kept}; free some space, then "
            "rerun the same command to resume")


def quiet_libraries() -> None:
    """orbax/absl log every checkpoint at INFO; keep the console for rlexp's own lines."""

    quiet_third_party()


def _parent(job: JobContext) -> dict[str, Any]:
    """The sweep's parent run: from the sweep dir (local, SLURM, Ray), else the one a remote
    launcher passed in the environment (xpk: the pod runs one job, not a multirun)."""

    parent = None
    if job.sweep_dir is not None:

        parent = parent_run_id(job.sweep_dir)
    parent = parent or parent_from_env()
    return {"parent_run_id": parent} if parent else {}


def _display(cfg: Config, job: JobContext, engine: Any) -> dict[str, Any]:
    """What trackers show besides params: a short run name, the resolved config, the data."""

    swept = swept_keys(job.sweep_dir)
    return {"run_name": display_name(cfg.tracker.run_name, job.choices, job.overrides, swept),
            "swept_tags": swept_tags(job.overrides, swept),  # the name's values in full
            "config": dataclasses.asdict(cfg), "user_tags": dict(cfg.tracker.tags),
            "datasets": {"name": cfg.dataset.name, "source": cfg.dataset.path or cfg.dataset.name,
                         "train": engine.splits.train, "eval": engine.splits.eval}}


def _listeners(cfg: Config, run_dir: Path) -> list:

    # The console hides only its bar/step lines with run.progress=false (evals, table stay).
    link = (lambda: run_dir_link(run_dir)) if cfg.tracker.name != "none" else None
    out: list[Listener] = [ProgressFile(run_dir), ConsoleListener(cfg, link=link)]
    if not runtime.is_main_process():  # one record per run: process 0 prints and tracks
        return [ProgressFile(run_dir, write=False), Muted()]
    tracker = make_listener(cfg, run_dir)
    if tracker is not None:
        out.append(tracker)

        if parent_from_env() and expected_jobs():  # after the tracker: this run has ended

            out.append(RemoteParentCloser(default_uri(cfg), parent_from_env(), expected_jobs()))
    return out
