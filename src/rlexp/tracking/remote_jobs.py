"""Sweeps whose jobs run on other machines stay one MLflow comparison. A launcher that runs jobs
elsewhere passes each job the sweep's store (MLFLOW_TRACKING_URI, read when tracker.uri is unset),
its parent run (RLEXP_PARENT_RUN_ID: the job's run becomes its child) and the job count
(RLEXP_SWEEP_JOBS: the last child to end closes the parent), and refuses at start a store the jobs
cannot reach. xpk's GKE pods see none of this machine's disk: a tracking server only (http(s):// or
databricks). SLURM and Ray jobs: a sqlite store only on the sweep dir's shared filesystem (submitit
pickles jobs there), though sqlite on a network filesystem is unsafe with many writers: prefer a
server (`mlflow server`, tracker.uri=http://host:5000). Import-light: no mlflow here."""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

from rlexp.base.errors import UserError
from rlexp.base.files import read_json_object
from rlexp.base.redact import unmask
from rlexp.tracking import PARENT_FILE
from rlexp.tracking.store import resolve_uri, sqlite_path

ENV_URI = "MLFLOW_TRACKING_URI"
ENV_PARENT = "RLEXP_PARENT_RUN_ID"
ENV_JOBS = "RLEXP_SWEEP_JOBS"
_KINDS = ("xpk", "slurm", "ray")  # remote launchers, as hydra.launcher._target_ names them
SERVER_SCHEMES = ("http://", "https://", "databricks")


def tracker_uri(config: object) -> str | None:
    """A sweep's tracking URI from its composed config; None when tracker=none."""
    if OmegaConf.select(config, "tracker.name", default="mlflow") == "none":
        return None
    return resolve_uri(OmegaConf.select(config, "tracker.uri", default=None))


def launcher_kind(target: str | None) -> str:
    """'xpk', 'slurm', 'ray', or 'local' for a hydra.launcher._target_."""
    text = (target or "").lower()
    if "submititlocal" in text.replace("_", "") or "rlexplocal" in text.replace("_", ""):
        return "local"
    return next((kind for kind in _KINDS if kind in text), "local")


def check_store(kind: str, uri: str | None, sweep_dir: Path, choice: str | None = None) -> None:
    """UserError (one line, what to pass instead) when `kind`'s jobs cannot reach `uri`."""
    if kind == "local" or uri is None or uri.startswith(SERVER_SCHEMES):
        return
    shown, choice = uri, choice or kind  # a sqlite:// or file: URI holds no credentials
    if kind == "xpk":
        raise UserError(f"hydra/launcher={choice}: tracking store {shown} is on this machine and "
                        f"the pods cannot reach it; pass tracker.uri=http://<mlflow server>:5000 "
                        f"(or MLFLOW_TRACKING_URI), or tracker=none")
    db = sqlite_path(uri)
    path = db if db is not None else Path(uri.removeprefix("file://").removeprefix("file:"))
    if _device(path) != _device(sweep_dir):
        raise UserError(f"hydra/launcher={choice}: tracking store {shown} is not on the sweep "
                        f"dir's filesystem ({sweep_dir.absolute()}), which is the one the jobs "
                        f"share; pass tracker.uri=http://<mlflow server>:5000 or a sqlite:/// "
                        f"path next to the sweep dir")


def _device(path: Path) -> int:
    probe = Path(path).absolute()
    while not probe.exists():
        probe = probe.parent
    return os.stat(probe).st_dev


def job_env(sweep_dir: Path, num_jobs: int | None) -> dict[str, str]:
    """What each job is given: store and parent from <sweep dir>/parent_run.json, and the job
    count unless None (the launcher waits and closes the parent). Empty when tracking is off."""
    parent = read_json_object(Path(sweep_dir) / PARENT_FILE)
    if parent is None or not parent.get("run_id"):
        return {}
    # the file holds the URI's credentials as mask_argv's placeholders: the jobs get them back
    jobs = {ENV_JOBS: str(num_jobs)} if num_jobs is not None else {}
    return {ENV_URI: unmask(str(parent["uri"])), ENV_PARENT: str(parent["run_id"]), **jobs}


def parent_from_env() -> str | None:
    """The parent run a remotely launched job was given (RLEXP_PARENT_RUN_ID)."""
    return os.environ.get(ENV_PARENT) or None


def expected_jobs() -> int | None:
    try:
        return int(os.environ[ENV_JOBS])
    except (KeyError, ValueError):
        return None


def check_sweep_store(base: object) -> None:
    """Multirun pre-flight: the jobs reach the tracking store, an xpk pod's outputs outlive it."""
    kind = launcher_kind(OmegaConf.select(base, "hydra.launcher._target_", default=None))
    choices = OmegaConf.select(base, "hydra.runtime.choices", default=None) or {}
    check_store(kind, tracker_uri(base), Path(str(OmegaConf.select(base, "hydra.sweep.dir"))),
                choices.get("hydra/launcher"))
    output_uri = str(OmegaConf.select(base, "run.output_uri", default=None) or "")
    if kind == "xpk" and ("://" not in output_uri or output_uri.startswith("file:")):
        raise UserError("hydra/launcher=xpk: run.output_uri is not set, so checkpoints and "
                        "summaries would stay on the pod's disk and vanish with it; pass "
                        "run.output_uri=gs://<bucket>/<prefix>")
