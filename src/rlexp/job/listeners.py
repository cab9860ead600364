"""The run's listeners (listeners_for) and what they hear at its start (run_info): progress.json,
process 0's console, tracker and sweep messages; the run's params, tags and parent."""

from __future__ import annotations

import dataclasses
import json
import os
import socket
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.base.events import Listener, RunInfo
from rlexp.base.files import write_atomic
from rlexp.base.redact import redact_params, redact_text
from rlexp.config.naming import flatten
from rlexp.config.schema import Config
from rlexp.job import process0
from rlexp.job.console import ConsoleListener
from rlexp.job.sweep_messages import current_job
from rlexp.tracking import default_uri, make_listener, parent_run_id, swept_keys
from rlexp.tracking.callback import RemoteParentCloser
from rlexp.tracking.compare import JOB_INDEX_TAG
from rlexp.tracking.conventions import display_name, swept_tags
from rlexp.tracking.environment import git_tags, version_tags
from rlexp.tracking.links import run_dir_link
from rlexp.tracking.remote_jobs import expected_jobs, parent_from_env

if TYPE_CHECKING:
    from rlexp.job.context import JobContext


class ProgressFile(Listener):
    """run_dir/progress.json: the latest step, for schedulers, watchdogs and the resume bench."""

    def __init__(self, run_dir: Path, write: bool = True):
        self.path = run_dir / "progress.json"
        self.step = -1  # the latest step whose metrics this process emitted (-1: none yet)
        self.write = write  # False: count steps only (a multi-controller run's other processes)

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.step = step
        if self.write:
            write_atomic(self.path, json.dumps({"step": step, "time": time.time()}))


def listeners_for(cfg: Config, run_dir: Path) -> list[Listener]:
    """ProgressFile first, then process 0's console, tracker and sweep messages."""
    if not process0.here():  # one record per run: process 0 prints and tracks
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


def run_info(cfg: Config, job: JobContext, engine: Any, resumed: dict | None,
             started: float) -> RunInfo:
    # + the engine's parameter counts (params/total, params/trainable: model.lora trains less)
    counts = {k: v for k, v in engine.info.items() if k.startswith("params/")}
    return RunInfo(name=job.name, run_dir=job.run_dir,
                   params=redact_params({**flatten(cfg), **counts}), tags=run_tags(cfg, job),
                   start_step=engine.start_step, total_steps=cfg.train.steps,
                   sweep_dir=job.sweep_dir,
                   extra={**parent(job), "resumed": resumed is not None,
                          "started": started,  # the tracker's run starts when the job did
                          **_display(cfg, job, engine)})


def run_tags(cfg: Config, job: JobContext) -> dict[str, str]:
    tags = {"algo": cfg.algo.name, "model": cfg.model.name, "dataset": cfg.dataset.name,
            "hardware": cfg.hardware.name, "host": socket.gethostname(),
            "overrides": redact_text(" ".join(job.overrides)),
            "command": redact_text(" ".join([os.path.basename(sys.executable), "-m", "rlexp",
                                             *sys.argv[1:]])),
            **git_tags(), **version_tags()}
    if job.sweep_dir is not None:
        tags["sweep"] = job.sweep_dir.name
    if job.index is not None:
        tags[JOB_INDEX_TAG] = str(job.index)
    if cfg.run.init_from:  # a fork names its origin (run dir, checkpoint or MLflow run id)
        tags["rlexp.init_from"] = cfg.run.init_from
    return tags


def parent(job: JobContext) -> dict[str, Any]:
    """The sweep's parent run: from the sweep dir, else from the environment (xpk)."""
    found = (parent_run_id(job.sweep_dir) if job.sweep_dir else None) or parent_from_env()
    return {"parent_run_id": found} if found else {}


def _display(cfg: Config, job: JobContext, engine: Any) -> dict[str, Any]:
    """What trackers show besides params: a short run name, the resolved config, the data."""
    swept = swept_keys(job.sweep_dir)
    return {"run_name": display_name(cfg.tracker.run_name, job.choices, job.overrides, swept),
            "swept_tags": swept_tags(job.overrides, swept),  # the name's values in full
            "config": dataclasses.asdict(cfg), "user_tags": dict(cfg.tracker.tags),
            "datasets": {"name": cfg.dataset.name, "source": cfg.dataset.path or cfg.dataset.name,
                         "train": engine.splits.train, "eval": engine.splits.eval}}
