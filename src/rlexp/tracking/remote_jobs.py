"""Sweeps whose jobs run on other machines stay one MLflow comparison.

A launcher that runs jobs elsewhere passes each job, as environment variables,
  MLFLOW_TRACKING_URI   the sweep's store (MLflow's own variable: rlexp reads it when
                        tracker.uri is unset)
  RLEXP_PARENT_RUN_ID   the sweep's parent run: the job's run becomes its child
  RLEXP_SWEEP_JOBS      how many jobs the sweep has: the last child to end closes the parent
and refuses at start a store the jobs cannot reach:
  xpk (GKE pods)        only a tracking server (http:// or https://, or databricks): the pod
                        sees none of the launching machine's disk, so no sqlite:// or file:
  SLURM, Ray            a sqlite store only on the sweep dir's filesystem: these jobs already
                        write into the sweep dir (submitit pickles jobs there), so a cluster that
                        runs them shares that filesystem, and a store on it is reached the same
                        way. sqlite on a network filesystem is unsafe with many writers: prefer
                        a server there (`mlflow server`, then tracker.uri=http://host:5000).
Import-light: no mlflow here.
"""

from __future__ import annotations

import os
from pathlib import Path

from omegaconf import OmegaConf

from rlexp.base.errors import UserError
from rlexp.base.files import read_json_object
from rlexp.base.redact import unmask
from rlexp.tracking.store import resolve_uri, sqlite_path

ENV_URI = "MLFLOW_TRACKING_URI"
ENV_PARENT = "RLEXP_PARENT_RUN_ID"
ENV_JOBS = "RLEXP_SWEEP_JOBS"
# Parent run file the sweep callback writes into the sweep dir.
PARENT_FILE = "parent_run.json"
# hydra.launcher._target_ fragments -> the kind of remote launcher.
_KINDS = (("xpk", "xpk"), ("slurm", "slurm"), ("ray", "ray"))
SERVER_SCHEMES = ("http://", "https://", "databricks")


def launcher_kind(target: str | None) -> str:
    """'xpk', 'slurm', 'ray', or 'local' for a hydra.launcher._target_."""
    text = (target or "").lower()
    if "submititlocal" in text.replace("_", "") or "rlexplocal" in text.replace("_", ""):
        return "local"
    return next((kind for frag, kind in _KINDS if frag in text), "local")


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


def job_env(sweep_dir: Path, num_jobs: int) -> dict[str, str]:
    """What each job of a sweep is given: the store and parent from <sweep dir>/parent_run.json
    (made by the sweep callback), and the job count. Empty when tracking is off."""
    parent = read_json_object(Path(sweep_dir) / PARENT_FILE)
    if parent is None or not parent.get("run_id"):
        return {}
    # the file holds the URI's credentials as mask_argv's placeholders: the jobs get them back
    return {ENV_URI: unmask(str(parent["uri"])), ENV_PARENT: str(parent["run_id"]),
            ENV_JOBS: str(num_jobs)}


def parent_from_env() -> str | None:
    """The parent run a remotely launched job was given (RLEXP_PARENT_RUN_ID)."""
    return os.environ.get(ENV_PARENT) or None


def expected_jobs() -> int | None:
    try:
        return int(os.environ[ENV_JOBS])
    except (KeyError, ValueError):
        return None


def check_sweep_store(base: object) -> None:
    """Pre-flight of a multirun (the composed config with `hydra`): the launcher's jobs can
    reach the tracking store, and an xpk pod writes its outputs somewhere that outlives it.
    Runs before the sweep callback opens the parent run."""

    kind = launcher_kind(OmegaConf.select(base, "hydra.launcher._target_", default=None))
    choices = OmegaConf.select(base, "hydra.runtime.choices", default=None) or {}
    if OmegaConf.select(base, "tracker.name", default="mlflow") != "none":
        uri = resolve_uri(OmegaConf.select(base, "tracker.uri", default=None))
        check_store(kind, uri, Path(str(OmegaConf.select(base, "hydra.sweep.dir"))),
                    choices.get("hydra/launcher"))
    output_uri = str(OmegaConf.select(base, "run.output_uri", default=None) or "")
    if kind == "xpk" and ("://" not in output_uri or output_uri.startswith("file:")):
        raise UserError("hydra/launcher=xpk: run.output_uri is not set, so checkpoints and "
                        "summaries would stay on the pod's disk and vanish with it; pass "
                        "run.output_uri=gs://<bucket>/<prefix>")
