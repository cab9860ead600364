"""MLflow tracking; the rest of rlexp uses the names in __all__ (none imports mlflow until used).
Modules: listener (loop events -> spool -> MLflow), run (sends the spool), spool, store,
conventions (MLflow names and tags), links, environment (packages, devices, git diff), callback
(the sweep's parent run), compare and plots (a sweep's tables and curves), seed_stats, remote_jobs
(jobs on other machines), and the commands sync, report and ui. Layer: tracking; may import
rlexp.config, rlexp.algo, rlexp.base. Nothing in the training path imports mlflow itself."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from rlexp.base.files import read_json_object
from rlexp.tracking.conventions import constant_metrics
from rlexp.tracking.listener import MlflowListener
from rlexp.tracking.spool import Link
from rlexp.tracking.store import default_uri, prepare_store, resolve_uri, warm_up

if TYPE_CHECKING:
    from rlexp.config.schema import Config
    from rlexp.base.events import Listener

PARENT_FILE = "parent_run.json"
# The keys a sweep varies (written by callback.SweepCallback), for its jobs' run names.
SWEPT_FILE = "swept_keys.json"

__all__ = ["default_uri", "prepare_store", "resolve_uri", "make_listener", "warm_up",
           "parent_run_id", "run_id", "swept_keys", "PARENT_FILE", "SWEPT_FILE"]


def make_listener(cfg: "Config", run_dir: Path) -> "Listener | None":
    """The run's MLflow listener; None when tracker=none."""
    uri = default_uri(cfg)
    if uri is None:
        return None
    t = cfg.train
    return MlflowListener(uri=uri, experiment=cfg.tracker.experiment, run_dir=Path(run_dir),
                          gated=t.checkpoint_every > 0, flush_every_s=cfg.tracker.flush_every_s,
                          constant=constant_metrics(cfg.algo.num_iterations, t.batch_size,
                                                    t.mini_batch_size,
                                                    cfg.rollout.off_policy_steps),
                          system_metrics_every_s=cfg.tracker.system_metrics_every_s)


def parent_run_id(sweep_dir: Path) -> str | None:
    """The sweep's MLflow parent run id from <sweep dir>/parent_run.json, if there is one."""
    return (read_json_object(Path(sweep_dir) / PARENT_FILE) or {}).get("run_id")


def swept_keys(sweep_dir: Path | None) -> list[str] | None:
    """The keys the sweep in `sweep_dir` varies; None outside a sweep or when unknown."""
    if sweep_dir is None:
        return None
    keys = (read_json_object(Path(sweep_dir) / SWEPT_FILE) or {}).get("keys")
    return [str(k) for k in keys] if isinstance(keys, list) else None


def run_id(run_dir: Path) -> str | None:
    """The MLflow run `run_dir` logs to (its tracking.json)."""
    link = Link.load(Path(run_dir))
    return link.run_id if link is not None else None
