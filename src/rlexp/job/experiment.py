"""One job, start to end, in named phases (_run_locked). Data flows one way: config -> plan ->
components -> loop -> listeners. This is the only place that decides a run's status (FINISHED,
FAILED, KILLED); summary.json is written through rlexp.base.summary.

A rerun learns the earlier attempt's state from the first readable of: summary.json, the MLflow
run (tracking.json's id, else the run tagged rlexp.run_dir), the newest checkpoint (the loop's
last one carries `eval_after`). A damaged or missing summary.json of a run that finished is
said in one line and rebuilt from the others: the run is reported finished, never trained or
reopened again (its MLflow run stays FINISHED).

A full disk (ENOSPC, or orbax's RESOURCE_EXHAUSTED) anywhere during the run stops it FAILED with
one line naming the path and its free space: the unfinished checkpoint is removed (the last
good one stays), no *.tmp file is left, and a small reserve file, deleted first, leaves room
for summary.json and the tracker's final records.

A multi-controller run (hardware.runtime=multi_controller) runs all of this in every process;
process 0 alone writes summary.json, progress.json and the export, opens the MLflow run and
prints (rlexp.base.runtime.is_main_process).
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
import shutil
import socket
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import OmegaConf

from rlexp import engine as engine_lib
from rlexp.base import runtime
from rlexp.base.errors import UserError, fail
from rlexp.base.events import Listener, Listeners, RunInfo
from rlexp.base.files import read_json_object, write_atomic
from rlexp.base.lock import Busy, DirLock, is_lock_file
from rlexp.base.redact import redact_params, redact_text, redact_uri, scrub_run_dir
from rlexp.base.summary import SUMMARY_FILE, read_summary, set_aside, write_summary
from rlexp.config.naming import flatten
from rlexp.config.schema import Config
from rlexp.data.rewards import RewardFailed
from rlexp.engine import export
from rlexp.engine.checkpoint_store import DiskFull, disk_full, remove_unfinished
from rlexp.inputs import storage
from rlexp.job import loop, stopping
from rlexp.job.console import FILE_ONLY, ConsoleListener, phase, quiet_third_party
from rlexp.job.sweep_messages import current_job
from rlexp.job.resume import Checkpointer, Preempted, StopFlag, final_metadata
from rlexp.planning.hardware import init_distributed, lost_peer, process_lines, sync_processes
from rlexp.planning.plan import make_plan
from rlexp.tracking import default_uri, make_listener, parent_run_id, swept_keys, warm_up
from rlexp.tracking.callback import RemoteParentCloser
from rlexp.tracking.conventions import display_name, swept_tags
from rlexp.tracking.environment import git_tags, version_tags
from rlexp.tracking.listener import recorded_run, warn
from rlexp.tracking.links import run_dir_link
from rlexp.tracking.remote_jobs import expected_jobs, parent_from_env

# Imported inside functions, on purpose: jax (1.4 s) is imported only to count devices once the
# run is built (_first_summary): pre-flight and dry runs import this module.

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


# Fields that describe one attempt: never taken from an earlier attempt's summary.
ATTEMPT_FIELDS = ("status", "error", "wall_s", "started", "steps_done", "resumed_from_step")


def carry_over(previous: dict | None, summary: dict) -> dict:
    """A rerun's summary keeps what the earlier attempt knew and this one does not (a rerun
    killed at once has no metrics of its own): a rewritten summary.json, and the MLflow
    artifact made from it, never lose results to an emptier one."""
    empty = (None, {}, [], "")
    out = dict(summary)
    for key, value in (previous or {}).items():
        if key not in ATTEMPT_FIELDS and out.get(key) in empty and value not in empty:
            out[key] = value
    return out


def recorded_state(cfg: Config, job: JobContext, checkpoints: Any) -> dict | None:
    """The earlier attempt's summary, from where the module docstring says (None: a new run,
    or one that stopped before its end and resumes). A damaged summary.json is set aside."""
    path = job.run_dir / SUMMARY_FILE
    previous = read_summary(job.run_dir)
    if previous is not None:
        return previous
    damaged = path.exists()
    final = final_metadata(checkpoints)
    if not damaged and final is None:
        return None  # no summary and training not done: a crash, the resume redoes the rest
    recorded = (recorded_run(default_uri(cfg), cfg.tracker.experiment, job.run_dir)
                if cfg.tracker.name == "mlflow" else None)
    what = f"{path} is missing"
    if damaged:
        aside = set_aside(job.run_dir)  # kept for a post-mortem
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
    link = read_json_object(job.run_dir / "tracking.json") or {}
    return {**_identity(job), "status": "FINISHED", "error": None,
            "steps_done": final.get("step"), "eval_before": final.get("eval_before") or {},
            "eval_after": eval_after, "objective": eval_after.get("eval/accuracy"),
            "mlflow_run_id": link.get("run_id"),
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
    # the plan, then hosts x devices per host, who logs, host RAM
    for line in [*plan.lines, *process_lines(cfg.hardware)]:
        print(f"  {line}")
    print(f"  outputs    {job.run_dir}")
    print(f"  tracking   {redact_uri(default_uri(cfg) or 'off (tracker=none)')}"
          f" experiment={cfg.tracker.experiment}")


def run(cfg: Config, job: JobContext) -> float | None:
    # Pre-flight refused a plan that does not fit (launch.checks.check_fits) before Hydra
    # launched this job, maybe in another process: the job makes it once and does not re-check.
    plan = make_plan(cfg)
    if cfg.run.dry_run:  # a dry-run job of a sweep that launches others
        print_plan(cfg, plan, job)
        return None
    try:
        init_distributed(cfg.hardware)  # multi_controller: join the others (0 of 1 otherwise)
    except UserError as exc:
        _user_error(str(exc), job)
    try:  # before rlexp writes anything: a second identical command exits 2
        lock = DirLock(job.run_dir, process=runtime.process_index()).acquire()
    except Busy as exc:
        if job.sweep_dir is None:
            fail(str(exc))
        raise  # in a sweep: this job fails without touching the dir; the summary is the owner's
    try:
        with runtime.frozen_heap():
            return _run_locked(cfg, job, plan)
    except UserError as exc:  # bad input found while building (_user_error): its one line
        if job.sweep_dir is None:
            fail(str(exc))
        return _job_failed(job, str(exc))
    except Exception as exc:  # before or after training (the build, a full disk, the summary)
        full = disk_full(exc, job.run_dir)
        if full is not None:
            logging.raiseExceptions = False  # log files on that disk: no "Logging error"
            _remove_tmp_files(job.run_dir)
            return _job_failed(job, f"{full.describe()}: free some space, then rerun the "
                                    "same command")
        log_traceback(exc)
        line = failure_line(exc)
        if (read_summary(job.run_dir) or {}).get("status") not in ("FAILED", "KILLED"):
            _failed_summary(job, line)  # (process 0's)
        return _job_failed(job, line)
    finally:
        lock.release()


def _job_failed(job: JobContext, line: str) -> float:
    """A job that failed outside the loop ends in its one line: exit 1, or, in a sweep, NaN
    (the other jobs go on; Hydra's sweepers take NaN as a failed trial, and the launching
    process counts it from the job's summary and its end record)."""
    if runtime.is_main_process():
        print(f"rlexp: error: {line}", file=sys.stderr, flush=True)
    if job.sweep_dir is None:
        sys.exit(1)
    sweep_job = current_job()
    if sweep_job is not None and sweep_job.status is None:
        sweep_job.status = "FAILED"
    return math.nan


def _remove_tmp_files(run_dir: Path) -> None:
    """Temporary files a write that hit a full disk left (summary.json.tmp,
    <file>.<pid>.<thread>.tmp, tracking_spool.jsonl.tmp)."""
    for path in run_dir.glob("*.tmp"):
        with contextlib.suppress(OSError):
            path.unlink()


def _run_locked(cfg: Config, job: JobContext, plan) -> float | None:
    """The job's phases: resolve_state -> build -> restore -> open_attempt -> train (the loop,
    then the export) -> finish (however training ended) -> end_run (objective, or exit)."""
    quiet_third_party()  # orbax/absl log each checkpoint at INFO: rlexp's lines only
    # <run dir>/checkpoints, or <run.output_uri>/<run name>/checkpoints (gs://: orbax writes it)
    checkpoints = storage.checkpoint_dir(cfg.run.output_uri, job.run_dir, job.name)
    previous = resolve_state(cfg, job, checkpoints)
    if (previous or {}).get("status") == "FINISHED":
        return previous.get("objective")
    started = time.time()
    engine = build(cfg, job, plan)
    checkpointer, resumed = restore(cfg, plan, engine, checkpoints)
    attempt = open_attempt(cfg, job, engine, checkpointer, resumed, previous, started)
    outcome = Outcome()
    try:
        train(attempt, outcome)
    finally:
        finish(attempt, outcome)
    return end_run(job, outcome, attempt.summary)


def resolve_state(cfg: Config, job: JobContext, checkpoints: Any) -> dict | None:
    """What an earlier attempt in this run dir left: its summary with run.resume=true (a
    finished run is said so here, and not trained again), nothing with run.resume=false (its
    checkpoints, tracking link and summary are removed)."""
    previous = None
    if cfg.run.resume:
        previous = recorded_state(cfg, job, checkpoints)
        if (previous or {}).get("status") == "FINISHED":
            if runtime.is_main_process():
                print(already_finished(job.run_dir, previous, git_tags()))
            return previous
    else:
        if runtime.is_main_process():
            _forget_previous(job.run_dir)
        sync_processes("rlexp.forget_previous")  # no process restores what process 0 removes
    if runtime.is_main_process():
        scrub_run_dir(job.run_dir)
    return previous


def build(cfg: Config, job: JobContext, plan) -> Any:
    """The engine (model, data, Tunix's learner). Bad input found here is one line, as in
    pre-flight; in a sweep, any other failure is this job's FAILED summary (with why)."""
    # The first line of a run, before JAX is imported (the build's first seconds).
    phase(f"{job.name}: building the model (importing JAX and Tunix)")
    if runtime.is_main_process():
        warm_up(cfg)  # MLflow's import and store open on a thread, while the engine builds
    try:
        storage.check_backend(cfg.run.output_uri)  # here, not in pre-flight: a launching machine
        return engine_lib.build(cfg, plan, job.run_dir)  # (xpk) needs no gcsfs
    except UserError as exc:  # bad input found while building: nothing was tracked yet
        _user_error(str(exc), job)
    except Exception as exc:
        if job.sweep_dir is not None:  # the sweep summary shows this job FAILED, with why
            _failed_summary(job, _error_line(exc))
        raise


def restore(cfg: Config, plan, engine: Any, checkpoints: Any) -> tuple[Checkpointer, dict | None]:
    """The checkpointer, and the metadata of the newest checkpoint that loads (run.resume=true;
    None: training starts at step 0)."""
    checkpointer = Checkpointer(checkpoints, cfg.train.keep_checkpoints, engine,
                                plan.checkpoint_bytes)
    resumed = checkpointer.restore_latest(cfg.train.seed) if cfg.run.resume else None
    engine.start_step = resumed["step"] if resumed else 0
    return checkpointer, resumed


@dataclass
class Attempt:
    """This attempt at the run, built and restored: what train and finish work on."""

    cfg: Config
    job: JobContext
    engine: Any
    checkpointer: Checkpointer
    # Metadata of the checkpoint the engine was restored from (None: from step 0).
    resumed: dict | None
    # The earlier attempt's summary (run.resume=true): what this one's keeps (carry_over).
    previous: dict | None
    # time.time() when the build began: the summary's `started`, the tracker run's start.
    started: float
    listeners: Observers
    # The last step this attempt reached (KILLED/FAILED summaries).
    progress: ProgressFile
    info: RunInfo
    # summary.json as it stands; finish completes and writes it.
    summary: dict[str, Any]
    # Early stopping and sweep pruning (rlexp.job.stopping).
    stops: Any
    reserve: DiskReserve

    def steps_done(self) -> int:
        return max(self.engine.start_step, self.progress.step)


@dataclass
class Outcome:
    """How training ended: FINISHED, KILLED (SIGTERM, Ctrl-C) or FAILED, with its line."""

    status: str = "FAILED"
    error: str | None = None
    # The disk filled up: the unfinished checkpoint and *.tmp files go at the end.
    full: DiskFull | None = None
    # A multi-controller run lost one of its processes (the line every survivor prints).
    lost: str | None = None


def open_attempt(cfg: Config, job: JobContext, engine: Any, checkpointer: Checkpointer,
                 resumed: dict | None, previous: dict | None, started: float) -> Attempt:
    """In this order: the listeners, what they hear first, the summary's first fields, the
    stops and the disk reserve."""
    listener_list = _listeners(cfg, job.run_dir)
    return Attempt(
        cfg=cfg, job=job, engine=engine, checkpointer=checkpointer, resumed=resumed,
        previous=previous, started=started, listeners=Observers(listener_list, job.run_dir),
        progress=listener_list[0], info=_run_info(cfg, job, engine, resumed, started),
        summary=_first_summary(job, engine, started),
        stops=stopping.build(cfg.train.early_stop, cfg.train.prune, job.sweep_dir, job.name),
        reserve=DiskReserve(job.run_dir if runtime.is_main_process() else None))


def _run_info(cfg: Config, job: JobContext, engine: Any, resumed: dict | None,
              started: float) -> RunInfo:
    # + the engine's parameter counts (params/total, params/trainable: model.lora trains less)
    counts = {k: v for k, v in engine.info.items() if k.startswith("params/")}
    return RunInfo(name=job.name, run_dir=job.run_dir,
                   params=redact_params({**flatten(cfg), **counts}), tags=run_tags(cfg, job),
                   start_step=engine.start_step, total_steps=cfg.train.steps,
                   sweep_dir=job.sweep_dir,
                   extra={**_parent(job), "resumed": resumed is not None,
                          "started": started,  # the tracker's run starts when the job did
                          **_display(cfg, job, engine)})


def _first_summary(job: JobContext, engine: Any, started: float) -> dict[str, Any]:
    import jax

    return {
        **_identity(job), "status": "RUNNING", "devices": jax.device_count(), "started": started,
        "resumed_from_step": engine.start_step,
        # The code that produced the run ("already finished" names it on a rerun).
        **{k.replace(".", "_"): v for k, v in git_tags().items()},
    }


def train(a: Attempt, outcome: Outcome) -> None:
    """The loop, then the export; how it ended goes into `outcome`: any error is the run's
    FAILED end, said in one line (failure_line), its traceback in the run's rlexp.log."""
    try:
        with StopFlag() as stop:
            a.listeners.on_run_start(a.info)
            for console in a.listeners.listeners:  # run dir and MLflow link, once the run exists
                if isinstance(console, ConsoleListener):
                    console.show_link()
            a.summary.update(loop.run(a.cfg, a.engine, a.listeners, a.job.run_dir,
                                      checkpointer=a.checkpointer, stop=stop,
                                      resumed=a.resumed, stops=a.stops))
        outcome.status = "FINISHED"
        if a.cfg.run.export:
            a.summary["export"] = _export(a.cfg, a.engine, a.job.run_dir, a.listeners)
    except Preempted as exc:
        outcome.status = "KILLED"
        outcome.error = f"preempted (SIGTERM) after {exc}: rerun the command to resume"
    except KeyboardInterrupt:
        outcome.status, outcome.error = "KILLED", "interrupted"
    except loop.NonFinite as exc:
        unsaved = (f"no checkpoint was saved (train.checkpoint_every="
                   f"{a.cfg.train.checkpoint_every}): a rerun starts from step 0")
        outcome.error = f"{exc}; {_kept(a.checkpointer, unsaved)}"
    except Exception as exc:
        outcome.full = disk_full(exc, a.job.run_dir)
        if outcome.full is not None:  # no traceback: its log file may be on the full disk
            kept = _kept(a.checkpointer, "no checkpoint was saved yet")
            outcome.error = (f"{outcome.full.describe()}: stopped after step {a.steps_done()}; "
                             f"{kept}; free some space, then rerun the same command to resume")
        else:
            outcome.lost = lost_peer(exc)
            log_traceback(exc)
            outcome.error = outcome.lost or failure_line(exc)


def finish(a: Attempt, outcome: Outcome) -> None:
    """The run's end, however training ended (a full disk: see the module docstring)."""
    if outcome.full is not None:
        logging.raiseExceptions = False  # log files on that disk: no "--- Logging error ---"
    a.reserve.release()  # room for the last words below
    if outcome.lost is None:  # orbax's close waits for every process: not for a lost one
        a.checkpointer.close()
    tracking = read_json_object(a.job.run_dir / "tracking.json") or {}
    eval_after = a.summary.get("eval_after") or {}
    a.summary.update(status=outcome.status, error=outcome.error,
                     wall_s=round(time.time() - a.started, 3),
                     mlflow_run_id=tracking.get("run_id"),
                     objective=eval_after.get("eval/accuracy"))
    a.summary.setdefault("steps_done", a.steps_done())
    a.summary = carry_over(a.previous, a.summary)
    _record(a, outcome)
    if runtime.is_main_process():
        storage.mirror_outputs(a.cfg.run.output_uri, a.job.name, a.job.run_dir)  # output_uri
    a.listeners.on_run_end(outcome.status, a.summary)
    a.stops.finish(outcome.status, a.summary)
    if outcome.full is not None:
        remove_unfinished(a.checkpointer.directory)
        _remove_tmp_files(a.job.run_dir)


def _record(a: Attempt, outcome: Outcome) -> None:
    """summary.json; a disk that fills up now leaves a trained run FAILED (not recorded: the
    rerun only writes it)."""
    try:
        write_summary(a.job.run_dir, a.summary)
    except OSError as exc:
        late = disk_full(exc, a.job.run_dir)
        if late is None:
            raise
        outcome.full = outcome.full or late
        if outcome.status == "FINISHED":
            outcome.status, outcome.error = "FAILED", (
                f"{late.describe()}: summary.json not written; free some space, then rerun "
                "the same command")
            a.summary.update(status=outcome.status, error=outcome.error)


def end_run(job: JobContext, outcome: Outcome, summary: dict[str, Any]) -> float | None:
    """A finished run returns its objective (what a sweeper optimizes). Otherwise, after its
    one line, a sweep's job returns NaN (the other jobs go on); a single run exits 143
    (KILLED) or 1."""
    if outcome.status == "FINISHED":
        return summary["objective"]
    # process 0's console said a FAILED run's line (ConsoleListener.on_run_end); a KILLED
    # run's reason, and a lost peer on the other survivors, are said here: once a process
    said = runtime.is_main_process() and outcome.status == "FAILED"
    if outcome.lost is not None:  # every survivor says it; exit now: jax.distributed's
        if not said:  # shutdown would wait for the lost process, then abort
            print(f"rlexp: error: {outcome.error}", file=sys.stderr, flush=True)
        runtime.exit_at_once(1)
    if runtime.is_main_process() and not said:
        print(f"rlexp: {outcome.error}", file=sys.stderr, flush=True)
    if job.sweep_dir is not None:  # the other jobs go on: NaN, as _job_failed
        return math.nan
    sys.exit(143 if outcome.status == "KILLED" else 1)


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


def _error_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"


def failure_line(exc: BaseException) -> str:
    """A failure after start-up in one line, naming its cause and where it struck: 'reward
    exact raised ValueError: grader down at step 3' (a reward plug-in names itself),
    'OSError: [Errno 5] Input/output error: '/data/x.jsonl' in the evaluation at step 0'."""
    cause = str(exc) if isinstance(exc, RewardFailed) else _error_line(exc)
    where = loop.failed_at(exc)
    return redact_text(f"{cause} {where}" if where else cause)


def log_traceback(exc: BaseException) -> None:
    """The traceback, for the run's rlexp.log only: the console has the one line."""
    logging.getLogger(FILE_ONLY).error("the run failed: %s", failure_line(exc), exc_info=exc)


def _kept(checkpointer: Checkpointer, unsaved: str) -> str:
    """What a rerun resumes from, as the checkpoints on disk say (`unsaved`: none is)."""
    last = checkpointer.last_good()
    return unsaved if last is None else f"the last good checkpoint (step {last}) is kept"


def _failed_summary(job: JobContext, error: str) -> None:
    if not runtime.is_main_process():
        return
    job.run_dir.mkdir(parents=True, exist_ok=True)
    write_summary(job.run_dir, {**_identity(job), "status": "FAILED", "error": error,
                                "objective": None})


def _user_error(message: str, job: JobContext) -> NoReturn:
    if job.sweep_dir is None:
        # Bad input found after Hydra made the run dir: leave nothing half-made behind.
        hydra_only = {".hydra", "rlexp.log", "__main__.log", "rlexp.lock", RESERVE_FILE}
        if job.run_dir.is_dir() and all(p.name in hydra_only or is_lock_file(p.name)
                                        for p in job.run_dir.iterdir()):
            shutil.rmtree(job.run_dir, ignore_errors=True)
        fail(message)
    _failed_summary(job, message)
    raise UserError(message)  # in a sweep: this job fails, the others go on


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
        if self.write:
            write_atomic(self.path, json.dumps({"step": step, "time": time.time()}))


class Observers(Listeners):
    """The run's listeners: a failing one is logged and the run goes on, except for a full
    disk, raised as DiskFull once every listener had the event (the resume redoes the steps
    after the last good checkpoint)."""

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


# The module docstring's reserve file: summary.json and the tracker's last records take a few
# KiB of it; the rest is margin.
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
        if self.path is not None:
            with contextlib.suppress(OSError):
                self.path.unlink(missing_ok=True)


def _parent(job: JobContext) -> dict[str, Any]:
    """The sweep's parent run: from the sweep dir (local, SLURM, Ray), else the one a remote
    launcher passed in the environment (xpk: the pod runs one job, not a multirun)."""
    parent = (parent_run_id(job.sweep_dir) if job.sweep_dir else None) or parent_from_env()
    return {"parent_run_id": parent} if parent else {}


def _display(cfg: Config, job: JobContext, engine: Any) -> dict[str, Any]:
    """What trackers show besides params: a short run name, the resolved config, the data."""
    swept = swept_keys(job.sweep_dir)
    return {"run_name": display_name(cfg.tracker.run_name, job.choices, job.overrides, swept),
            "swept_tags": swept_tags(job.overrides, swept),  # the name's values in full
            "config": dataclasses.asdict(cfg), "user_tags": dict(cfg.tracker.tags),
            "datasets": {"name": cfg.dataset.name, "source": cfg.dataset.path or cfg.dataset.name,
                         "train": engine.splits.train, "eval": engine.splits.eval}}


def _listeners(cfg: Config, run_dir: Path) -> list[Listener]:
    """ProgressFile first (the step a KILLED or FAILED summary names), then process 0's
    console, tracker and sweep messages; the other processes only count steps."""
    if not runtime.is_main_process():  # one record per run: process 0 prints and tracks
        return [ProgressFile(run_dir, write=False)]
    link = (lambda: run_dir_link(run_dir)) if cfg.tracker.name != "none" else None
    out: list[Listener] = [ProgressFile(run_dir), ConsoleListener(cfg, link=link)]
    tracker = make_listener(cfg, run_dir)
    if tracker is not None:
        out.append(tracker)
        if parent_from_env() and expected_jobs():  # after the tracker: this run has ended
            out.append(RemoteParentCloser(default_uri(cfg), parent_from_env(), expected_jobs()))
    sweep_job = current_job()
    if sweep_job is not None:  # the status its end record tells the launching process
        out.append(sweep_job)
    return out
