"""One job, start to end, in named phases (_run_locked): config -> plan -> engine -> loop ->
listeners. The only place that decides a run's status (FINISHED, FAILED, KILLED). The phases
call the job's policies: resume, failure, disk, process0, listeners (a module each)."""

from __future__ import annotations

import logging
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from rlexp import engine as engine_lib
from rlexp.base import runtime
from rlexp.base.errors import UserError
from rlexp.base.events import Listeners, RunInfo
from rlexp.base.files import read_json_object
from rlexp.base.lock import Busy, DirLock
from rlexp.base.redact import redact_uri, scrub_run_dir
from rlexp.base.summary import read_summary
from rlexp.config.schema import Config
from rlexp.engine import export
from rlexp.engine.checkpoint_store import DiskFull
from rlexp.inputs import storage
from rlexp.job import disk, failure, loop, process0, resume, stopping
from rlexp.job.console import ConsoleListener, phase, quiet_third_party
from rlexp.job.context import JobContext
from rlexp.job.listeners import ProgressFile, listeners_for, run_info
from rlexp.job.resume import Checkpointer, Preempted, StopFlag
from rlexp.planning.hardware import init_distributed, lost_peer, process_lines, sync_processes
from rlexp.planning.plan import make_plan
from rlexp.tracking import default_uri, warm_up
from rlexp.tracking.environment import git_tags

# jax (1.4 s) is imported in _first_summary only: pre-flight and dry runs import this module.

log = logging.getLogger("rlexp")


def print_plan(cfg: Config, plan, job: JobContext) -> None:
    print("rlexp plan (dry run: nothing compiled)")
    for line in [*plan.lines, *process_lines(cfg.hardware)]:
        print(f"  {line}")
    print(f"  outputs    {job.run_dir}")
    print(f"  tracking   {redact_uri(default_uri(cfg) or 'off (tracker=none)')}"
          f" experiment={cfg.tracker.experiment}")


def run(cfg: Config, job: JobContext) -> float | None:
    plan = make_plan(cfg)  # pre-flight refused one that does not fit (launch.checks.check_fits)
    if cfg.run.dry_run:  # a dry-run job of a sweep that launches others
        print_plan(cfg, plan, job)
        return None
    ends = failure.policy(job)
    try:
        init_distributed(cfg.hardware)  # multi_controller: join the others (0 of 1 otherwise)
    except UserError as exc:
        ends.refused(str(exc))
    try:  # before rlexp writes anything: a second identical command exits 2
        lock = DirLock(job.run_dir, process=runtime.process_index()).acquire()
    except Busy as exc:
        ends.busy(exc)
    try:
        with runtime.frozen_heap():
            return _run_locked(cfg, job, plan)
    except UserError as exc:  # bad input found while building (failure.refused): its one line
        return ends.bad_input(str(exc))
    except Exception as exc:  # before or after training (the build, a full disk, the summary)
        full = disk.found_full(exc, job.run_dir)
        if full is not None:
            disk.clean_up(job.run_dir)
            return ends.failed(f"{full.describe()}: {disk.RERUN}")
        failure.log_traceback(exc)
        line = failure.failure_line(exc)
        if (read_summary(job.run_dir) or {}).get("status") not in ("FAILED", "KILLED"):
            failure.failed_summary(job, line)
        return ends.failed(line)
    finally:
        lock.release()


def _run_locked(cfg: Config, job: JobContext, plan) -> float | None:
    """The job's phases: resolve_state -> build_engine -> restore -> open_attempt -> train (the
    loop, then the export) -> finish (however training ended) -> end_run (objective, or exit)."""
    quiet_third_party()  # orbax/absl log each checkpoint at INFO: rlexp's lines only
    checkpoints = storage.checkpoint_dir(cfg.run.output_uri, job.run_dir, job.name)
    previous = resolve_state(cfg, job, checkpoints)
    if (previous or {}).get("status") == "FINISHED":
        return previous.get("objective")
    started = time.time()
    engine = build_engine(cfg, job, plan)
    checkpointer, resumed = restore(cfg, plan, engine, checkpoints)
    attempt = open_attempt(cfg, job, engine, checkpointer, resumed, previous, started)
    outcome = Outcome()
    try:
        train(attempt, outcome)
    finally:
        finish(attempt, outcome)
    return end_run(job, outcome, attempt.summary)


def resolve_state(cfg: Config, job: JobContext, checkpoints: Any) -> dict | None:
    """The earlier attempt's summary (run.resume=true), else its checkpoints and summary go."""
    previous = None
    if cfg.run.resume:
        previous = resume.recorded_state(cfg, job, checkpoints)
        if (previous or {}).get("status") == "FINISHED":
            if process0.here():
                print(resume.already_finished(job.run_dir, previous, git_tags()))
            return previous
    else:
        process0.only(resume.forget_previous, job.run_dir)
        sync_processes("rlexp.forget_previous")  # no process restores what process 0 removes
    process0.only(scrub_run_dir, job.run_dir)
    return previous


def build_engine(cfg: Config, job: JobContext, plan) -> Any:
    """The engine: bad input is one line; in a sweep, other failures are this job's FAILED."""
    phase(f"{job.name}: building the model (importing JAX and Tunix)")
    process0.only(warm_up, cfg)  # MLflow's import and store open on a thread, while it builds
    try:
        storage.check_backend(cfg.run.output_uri)  # here, not in pre-flight: a launching machine
        return engine_lib.build(cfg, plan, job.run_dir)  # (xpk) needs no gcsfs
    except UserError as exc:  # bad input found while building: nothing was tracked yet
        failure.policy(job).refused(str(exc))
    except Exception as exc:
        failure.policy(job).build_failed(exc)
        raise


def restore(cfg: Config, plan, engine: Any, checkpoints: Any) -> tuple[Checkpointer, dict | None]:
    """The checkpointer, and the newest loadable checkpoint's metadata (None: from step 0)."""
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
    resumed: dict | None  # the restored checkpoint's metadata (None: from step 0)
    previous: dict | None  # the earlier attempt's summary (run.resume=true): resume.carry_over
    started: float  # time.time() at the build: the summary's `started`, the tracker run's start
    listeners: disk.Observers
    progress: ProgressFile  # the last step this attempt reached (KILLED/FAILED summaries)
    info: RunInfo
    summary: dict[str, Any]  # summary.json as it stands; finish completes and writes it
    stops: stopping.Stops
    reserve: disk.DiskReserve

    def steps_done(self) -> int:
        return max(self.engine.start_step, self.progress.step)


@dataclass
class Outcome:
    """How training ended: FINISHED, KILLED (SIGTERM, Ctrl-C) or FAILED, with its line."""

    status: str = "FAILED"
    error: str | None = None
    full: DiskFull | None = None  # a full disk: the unfinished checkpoint, *.tmp files go last
    lost: str | None = None  # a multi-controller run lost a process (every survivor's line)


def open_attempt(cfg: Config, job: JobContext, engine: Any, checkpointer: Checkpointer,
                 resumed: dict | None, previous: dict | None, started: float) -> Attempt:
    heard = listeners_for(cfg, job.run_dir)
    return Attempt(
        cfg=cfg, job=job, engine=engine, checkpointer=checkpointer, resumed=resumed,
        previous=previous, started=started, listeners=disk.Observers(heard, job.run_dir),
        progress=heard[0], info=run_info(cfg, job, engine, resumed, started),
        summary=_first_summary(job, engine, started),
        stops=stopping.make_stops(cfg.train.early_stop, cfg.train.prune, job.sweep_dir, job.name),
        reserve=disk.DiskReserve(job.run_dir if process0.here() else None))


def _first_summary(job: JobContext, engine: Any, started: float) -> dict[str, Any]:
    import jax
    return {
        **job.identity(), "status": "RUNNING", "devices": jax.device_count(), "started": started,
        "resumed_from_step": engine.start_step,
        # The code that produced the run ("already finished" names it on a rerun).
        **{k.replace(".", "_"): v for k, v in git_tags().items()},
    }


def train(a: Attempt, outcome: Outcome) -> None:
    """The loop, then the export; how it ended goes into `outcome` (traceback in rlexp.log)."""
    try:
        with StopFlag() as stop:
            a.listeners.on_run_start(a.info)
            for console in a.listeners.listeners:  # run dir and MLflow link, once the run exists
                if isinstance(console, ConsoleListener):
                    console.show_link()
            a.summary.update(loop.train_steps(a.cfg, a.engine, a.listeners, a.job.run_dir,
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
        outcome.full = disk.found_full(exc, a.job.run_dir)
        if outcome.full is not None:  # no traceback: its log file may be on the full disk
            kept = _kept(a.checkpointer, "no checkpoint was saved yet")
            outcome.error = (f"{outcome.full.describe()}: stopped after step {a.steps_done()}; "
                             f"{kept}; {disk.RERUN} to resume")
        else:
            outcome.lost = lost_peer(exc)
            failure.log_traceback(exc)
            outcome.error = outcome.lost or failure.failure_line(exc)


def finish(a: Attempt, outcome: Outcome) -> None:
    """The run's end, however training ended (a full disk: see rlexp.job.disk)."""
    a.reserve.release()  # room for the last words below
    if outcome.lost is None:  # orbax's close waits for every process: not for a lost one
        a.checkpointer.close()
    tracking = read_json_object(a.job.run_dir / "tracking.json") or {}
    a.summary.update(status=outcome.status, error=outcome.error,
                     wall_s=round(time.time() - a.started, 3), mlflow_run_id=tracking.get("run_id"),
                     objective=(a.summary.get("eval_after") or {}).get("eval/accuracy"))
    a.summary.setdefault("steps_done", a.steps_done())
    a.summary = resume.carry_over(a.previous, a.summary)
    _record(a, outcome)
    process0.only(storage.mirror_outputs, a.cfg.run.output_uri, a.job.name, a.job.run_dir)
    a.listeners.on_run_end(outcome.status, a.summary)
    a.stops.finish(outcome.status, a.summary)
    if outcome.full is not None:
        disk.clean_up(a.job.run_dir, a.checkpointer.directory)


def _record(a: Attempt, outcome: Outcome) -> None:
    """summary.json; a disk that fills up now leaves a trained run FAILED (a rerun writes it)."""
    late = disk.try_summary(a.job.run_dir, a.summary)
    if late is None:
        return
    outcome.full = outcome.full or late
    if outcome.status == "FINISHED":
        outcome.status, outcome.error = "FAILED", (
            f"{late.describe()}: summary.json not written; {disk.RERUN}")
        a.summary.update(status=outcome.status, error=outcome.error)


def end_run(job: JobContext, outcome: Outcome, summary: dict[str, Any]) -> float | None:
    """A finished run's objective (what a sweeper optimizes), else failure.policy's end."""
    if outcome.status == "FINISHED":
        return summary["objective"]
    # process 0's console said a FAILED run's line (ConsoleListener.on_run_end); a KILLED
    # run's reason, and a lost peer on the other survivors, are said here: once a process
    said = process0.here() and outcome.status == "FAILED"
    if outcome.lost is not None:  # every survivor says it; exit now: jax.distributed's
        if not said:  # shutdown would wait for the lost process, then abort
            print(f"rlexp: error: {outcome.error}", file=sys.stderr, flush=True)
        runtime.exit_at_once(1)
    if not said:
        process0.say(f"rlexp: {outcome.error}", error=True)
    return failure.policy(job).ended(outcome.status)


def _export(cfg: Config, engine: Any, run_dir: Path, observers: Listeners) -> str | None:
    """The policy as a Hugging Face dir (artifact `model`); never fails the run (checkpoint)."""
    try:
        source = Path(cfg.model.path) if cfg.model.path else None
        state = engine.policy_state()  # every process: gathering the shards is a collective
        if not process0.here():
            return None
        out = export.write(run_dir / export.EXPORT_DIR, state, cfg.model, source)
    except Exception as exc:
        log.warning("export failed (%s); retry with: python -m rlexp.export %s",
                    failure.error_line(exc), run_dir)
        return None
    observers.on_artifact(out, "model")
    return str(out)


def _kept(checkpointer: Checkpointer, unsaved: str) -> str:
    """What a rerun resumes from, as the checkpoints on disk say (`unsaved`: none is)."""
    last = checkpointer.last_good()
    return unsaved if last is None else f"the last good checkpoint (step {last}) is kept"
