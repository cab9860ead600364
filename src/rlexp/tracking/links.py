"""Where a run can be seen: its page in the MLflow UI when a server is known (known_ui), else
its run id and store (and the command that serves the store). No mlflow import."""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from rlexp.base.files import write_json_atomic
from rlexp.base.redact import redact_uri
from rlexp.tracking import store
from rlexp.tracking.spool import Link

# The UI's workflow switch (MLflow 3.17 server/js: WorkflowType.MACHINE_LEARNING): pages
# opened with it show the model-training view, not the GenAI one.
TRAINING_VIEW = "workflowType=machine_learning"
UI_SUFFIX = ".ui.json"


def ui_file(uri: str) -> Path | None:
    """<db>.ui.json of a sqlite store ({"url", "pid"}: rlexp.ui serves it now); else None."""
    db = store.sqlite_path(uri)
    return db.with_name(db.name + UI_SUFFIX) if db is not None else None


def announce_ui(uri: str, url: str) -> Path | None:
    """rlexp.ui serves `uri` at `url` (this process): runs started now link to it."""
    path = ui_file(uri)
    try:
        if path is not None:
            write_json_atomic(path, {"url": url, "pid": os.getpid()})
    except OSError:  # a read-only store dir: runs print the run id instead
        return None
    return path


def withdraw_ui(path: Path | None) -> None:
    with contextlib.suppress(OSError, ValueError, AttributeError):
        if path is not None and json.loads(path.read_text()).get("pid") == os.getpid():
            path.unlink()


def known_ui(uri: str) -> str | None:
    """The UI URL serving `uri` now: the server itself, else rlexp.ui's (alive), else None."""
    if uri.startswith(("http://", "https://")):
        return redact_uri(uri).rstrip("/")
    path = ui_file(uri)
    if path is None:  # not a sqlite store: no rlexp.ui announces it
        return None
    try:
        data = json.loads(path.read_text())
        pid, url = int(data["pid"]), str(data["url"])
        os.kill(pid, 0)  # raises when the UI is gone
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None
    return url.rstrip("/")


def uri_option(uri: str) -> str:
    """' --uri <store>' for a command that must reach `uri`, '' for the default store."""
    return "" if uri == store.resolve_uri(None) else f" --uri {redact_uri(uri)}"


def run_link(uri: str, experiment_id: str | None, run_id: str | None, hint: bool = True) -> str:
    """The run's UI page if a server is known, else 'run <id> in <store>' and how to see it."""
    if run_id is None:
        return f"not created yet (store {redact_uri(uri)} unreachable; records are spooled)"
    base = known_ui(uri)
    if base is not None and experiment_id:
        return f"{base}/#/experiments/{experiment_id}/runs/{run_id}?{TRAINING_VIEW}"
    where = f"run {run_id} in {redact_uri(uri)}"
    return f"{where} (open it with: python -m rlexp.ui{uri_option(uri)})" if hint else where


def run_dir_link(run_dir: Path) -> str | None:
    """run_link of the MLflow run `run_dir` logs to (its tracking.json); None without one."""
    link = Link.load(Path(run_dir))
    return run_link(link.uri, link.experiment_id, link.run_id) if link is not None else None
