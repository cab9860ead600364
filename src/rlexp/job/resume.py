"""Checkpoint and resume policy; the engine's state on disk is rlexp.engine.checkpoint_store's.
The step that matters lives in our metadata (Tunix's final save drops its global step). Orbax
renames a step's dir when complete, so a SIGKILL mid-save leaves no half checkpoint; one that
fails to restore is set aside with a warning for the one before. A save short of free space
(the newest checkpoint's size, the plan's for the first) raises DiskFull; committed ones stay.

A rerun learns the earlier attempt's state from the first readable of: summary.json, the MLflow
run (tracking.json's id, else the run tagged rlexp.run_dir), the newest checkpoint (the loop's
last one carries `eval_after`). A damaged or missing summary.json of a finished run is rebuilt
from the others, said in one line: the run is never trained or reopened again."""

from __future__ import annotations

import contextlib
import logging
import shutil
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.base.files import read_json_object
from rlexp.base.retention import prune_unusable
from rlexp.base.summary import SUMMARY_FILE, read_summary, set_aside, write_summary
from rlexp.config.schema import Config
from rlexp.engine.checkpoint_store import (DiskFull, committed_steps, dir_bytes, disk_full,
                                           free_bytes, is_local, read_metadata, remove_unfinished)
from rlexp.tracking import default_uri
from rlexp.tracking.listener import recorded_run, warn

if TYPE_CHECKING:
    from rlexp.engine import Engine
    from rlexp.job.context import JobContext

log = logging.getLogger("rlexp")


class Preempted(Exception):
    """SIGTERM arrived: the loop saved a checkpoint at a step boundary and stops."""


class StopFlag:
    """SIGTERM sets it; the loop checks it between steps, so checkpoints are consistent."""

    def __init__(self) -> None:
        self.requested = False
        self._previous: Any = None

    def _handler(self, signum: int, frame: Any) -> None:  # noqa: ARG002
        self.requested = True

    def __enter__(self) -> "StopFlag":
        self._previous = signal.signal(signal.SIGTERM, self._handler)
        return self

    def __exit__(self, *exc: Any) -> None:
        signal.signal(signal.SIGTERM, self._previous)


class Checkpointer:
    """Saves every `train.checkpoint_every` steps (and at the end), keeps the newest N."""

    def __init__(self, directory: Path, keep: int, engine: "Engine", checkpoint_bytes: float = 0.0):
        self.directory = directory
        remove_unfinished(directory)  # a killed save's temporary dir, before orbax sees it
        self.store = engine.checkpoint_store(str(directory), keep)
        # Bytes the next save needs: the newest checkpoint's size, else the plan's estimate.
        self.expected = float(checkpoint_bytes)
        self._measured = False
        self.failed = False  # a save failed (disk full): the store may not close cleanly

    def save(self, step: int, seed: int, extra: dict[str, Any]) -> Path:
        """Save synchronously (durable on return); DiskFull, nothing left, when it cannot."""
        self._check_room()
        target = self.directory / str(step)
        existed = is_local(self.directory) and Path(target).exists()
        try:
            self.store.save(step, {"step": step, "seed": seed, **extra})
        except Exception as exc:
            full = disk_full(exc, self.directory)
            if full is None:
                raise
            self.failed = True
            # its temporary dir (and a final dir it made) go, the others stay
            remove_unfinished(self.directory)
            if is_local(self.directory) and not existed and Path(target).is_dir():
                shutil.rmtree(target, ignore_errors=True)
            with contextlib.suppress(Exception):  # the save's own error is the one reported
                self.store.steps()  # re-read: orbax caches its list of steps
            raise DiskFull(self.directory, full.free) from None
        if is_local(self.directory) and Path(target).is_dir():
            self.expected, self._measured = float(dir_bytes(target)), True
        return target

    def _check_room(self) -> None:
        if not self._measured and is_local(self.directory):
            newest = committed_steps(self.directory)
            if newest:  # a resumed run: the checkpoints on disk say how big one is
                self.expected = max(self.expected, float(dir_bytes(
                    Path(self.directory) / str(newest[0]))))
            self._measured = True
        free = free_bytes(self.directory)
        if free is not None and free < self.expected:
            self.failed = True
            raise DiskFull(self.directory, free)

    def last_good(self) -> int | None:
        """The newest committed step on disk (None: none, or not a local dir)."""
        steps = committed_steps(self.directory)
        return steps[0] if steps else None

    def restore_latest(self, seed: int) -> dict[str, Any] | None:
        """Restore the newest checkpoint that loads; returns its metadata (None when none)."""
        for step in self.store.steps():
            try:
                meta = self.store.restore(step)
                if meta.get("step") != step or meta.get("seed") != seed:
                    raise ValueError(f"metadata {meta} does not match step {step}, seed {seed}")
            except Exception as exc:  # corrupt or half-written: fall back to the previous one
                bad = self.directory / str(step)
                aside = bad.with_name(f"{step}.unusable-{int(time.time())}")
                log.warning("checkpoint %s is unusable (%s); moved to %s, trying an earlier one",
                            bad, str(exc).splitlines()[0][:200], aside.name)
                bad.rename(aside)  # kept for a post-mortem, out of orbax's way (it re-saves)
                prune_unusable(self.directory)  # only the newest few (rlexp.base.retention)
                self.store.steps()  # re-read: orbax caches its list of steps
                continue
            self.store.resume(meta)
            log.info("resumed from checkpoint %s (step %d)", self.directory / str(step), step)
            return meta
        return None

    def close(self) -> None:
        try:
            self.store.close()
        except Exception:
            if not self.failed:
                raise
            # after a failed save orbax may re-raise its error on close: reported already


def final_metadata(directory: Path) -> dict[str, Any] | None:
    """The newest local checkpoint's metadata when it is a run's last (it has `eval_after`)."""
    steps = committed_steps(directory)
    meta = read_metadata(directory, steps[0]) if steps else None
    return meta if meta is not None and meta.get("eval_after") else None


# Fields that describe one attempt: never taken from an earlier attempt's summary.
ATTEMPT_FIELDS = ("status", "error", "wall_s", "started", "steps_done", "resumed_from_step")


def carry_over(previous: dict | None, summary: dict) -> dict:
    """What the earlier attempt's summary knew and this one does not (no emptier summary)."""
    empty = (None, {}, [], "")
    out = dict(summary)
    for key, value in (previous or {}).items():
        if key not in ATTEMPT_FIELDS and out.get(key) in empty and value not in empty:
            out[key] = value
    return out


def recorded_state(cfg: Config, job: JobContext, checkpoints: Any) -> dict | None:
    """The earlier attempt's summary (module docstring); a damaged one is set aside."""
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
                   "steps_done": int(steps) if str(steps).isdigit() else (final or {}).get("step"),
                   "objective": recorded.get("metrics", {}).get("eval/accuracy")}
        if final is not None:
            summary.update(eval_before=final.get("eval_before"), eval_after=final.get("eval_after"))
    summary.update(job.identity(), status=status, mlflow_run_id=recorded["run_id"],
                   rebuilt_from=f"MLflow run {recorded['run_id']}")
    if status == "FINISHED":
        summary["error"] = None
    return summary


def _summary_from_checkpoint(final: dict, job: JobContext) -> dict:
    """A finished run's summary from its final checkpoint's metadata (the loop's last save)."""
    eval_after = final.get("eval_after") or {}
    link = read_json_object(job.run_dir / "tracking.json") or {}
    return {**job.identity(), "status": "FINISHED", "error": None,
            "steps_done": final.get("step"), "eval_before": final.get("eval_before") or {},
            "eval_after": eval_after, "objective": eval_after.get("eval/accuracy"),
            "mlflow_run_id": link.get("run_id"), "rebuilt_from": f"checkpoint {final.get('step')}"}


def forget_previous(run_dir: Path) -> None:
    """run.resume=false: the old checkpoints, tracking link and summary no longer apply."""
    for name in ("checkpoints", "tracking.json", "tracking_spool.jsonl", "summary.json"):
        path = run_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        elif path.exists():
            path.unlink()


def already_finished(run_dir: Path, previous: dict, git: dict[str, str]) -> str:
    """A rerun of a finished command: which code finished it, and how to train again (a run's
    identity is its config, not the code, so a resume after a code change finds its dir)."""
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
