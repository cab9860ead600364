"""Where the MLflow store is, creating it once, and the MLflow limits we write within.

mlflow is imported inside functions only: `python -m rlexp --help` and Hydra's callback
loading must stay fast.
"""

from __future__ import annotations

import fcntl
import os
import re
import shutil
import sqlite3
import threading
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Iterator
from urllib.parse import unquote

from rlexp.base.errors import UserError
from rlexp.base.redact import redact_uri

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from rlexp.config.schema import Config

# Imported inside functions, on purpose: mlflow (2.3 s) is imported where the store is opened:
# tracking.warm_up does it on a thread while the engine builds, and pre-flight never needs it.

# Default store, relative to the directory the command runs in.
DEFAULT_DB = Path("outputs") / "mlflow.db"
# Artifacts of a sqlite store live next to the database, in this folder.
ARTIFACTS_DIR = "mlartifacts"
# MLflow limits (mlflow.utils.validation), copied so callers need not import mlflow.
MAX_KEY_LEN = 250
MAX_PARAM_VAL_LEN = 6000
MAX_TAG_VAL_LEN = 8000
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100
# HTTP stores: MLflow's defaults retry for minutes (7 retries, backoff 2 s); a tracker must
# fail fast and spool instead of stalling training. A user's own settings win.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1",
                 "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
                 "MLFLOW_HTTP_REQUEST_TIMEOUT": "15"}

_BAD_KEY_CHARS = re.compile(r"[^/\w.\- ]")
_prepared: set[str] = set()


def sqlite_path(uri: str) -> Path | None:
    """The database file of a `sqlite:///` URI (relative or absolute), else None."""
    if not uri.startswith("sqlite:///"):
        return None
    return Path(unquote(uri[len("sqlite:///"):].split("?", 1)[0]))


def resolve_uri(uri: str | None) -> str:
    """uri, else $MLFLOW_TRACKING_URI, else sqlite:///<cwd>/outputs/mlflow.db; sqlite made
    absolute so jobs started from another directory (SLURM, Ray) reach the same store."""
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{DEFAULT_DB}"
    path = sqlite_path(uri)
    if path is None:
        return uri
    query = uri.partition("?")[2]
    return f"sqlite:///{path.resolve()}" + (f"?{query}" if query else "")


def default_uri(cfg: "Config") -> str | None:
    """The tracking URI of a run, or None when tracking is off (tracker=none)."""
    if cfg.tracker.name == "none":
        return None
    return resolve_uri(cfg.tracker.uri)


def artifact_root(uri: str) -> Path | None:
    """Local artifact root of a sqlite store (<db dir>/mlartifacts); None = the server decides."""
    path = sqlite_path(uri)
    return path.parent / ARTIFACTS_DIR if path is not None else None


def is_file_store(uri: str) -> bool:
    return uri.startswith("file:") or "://" not in uri and not uri.startswith(("databricks",))


@contextmanager
def file_lock(path: Path) -> Iterator[None]:
    """An exclusive lock between processes (released by the OS if the holder dies)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def prepare_store(uri: str) -> None:
    """Create or upgrade a database store once, before jobs start.

    Several processes creating a new sqlite store at once race in MLflow's schema migration
    and can break it for good, so creation happens under a file lock next to the database.
    Idempotent and cheap on an existing store (~25 ms). A file store is a user error (MLflow 3
    refuses it); any other failure is only a warning: tracking is never fatal.
    """
    try:
        ensure_store(uri)
    except UserError:
        raise
    except Exception as exc:  # the listener spools and retries
        print(f"rlexp: warning: could not prepare the MLflow store {uri}: "
              f"{first_line(exc)}", flush=True)


# Stores being prepared on a thread while the job builds its engine (prepare_in_background).
_background: dict[str, threading.Thread] = {}


def prepare_in_background(uri: str) -> None:
    """Import MLflow and create or open the store on a thread: the job meanwhile builds its
    engine (model, warm start, Tunix), mostly compiled JAX code outside the GIL, so the
    MLflow import (2.5 s) and opening the store (0.3 s for a new one: _copy_schema) leave the
    path to the first step. The listener waits for it (wait_prepared) and reports any error itself."""
    if uri in _prepared or uri in _background:
        return

    def prepare() -> None:
        try:
            ensure_store(uri)
        except Exception:  # the listener's own ensure_store raises or warns as usual
            pass

    # Not a daemon: a job that exits early (bad input found while building) waits for the
    # schema migration to end instead of leaving a half-migrated store.
    thread = threading.Thread(target=prepare, name="rlexp-mlflow-store", daemon=False)
    _background[uri] = thread
    thread.start()


def wait_prepared(uri: str) -> None:
    thread = _background.pop(uri, None)
    if thread is not None:
        thread.join()


def ensure_store(uri: str) -> None:
    """prepare_store that raises: what a writer calls before its first write."""
    if uri in _prepared:
        return
    if is_file_store(uri) and os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() != "true":
        raise UserError(f"tracker.uri={uri} is a file store, which MLflow 3 refuses; use "
                        "sqlite:///path/mlflow.db or http://host:port")
    path = sqlite_path(uri)
    if path is None and not uri.startswith(("postgresql", "mysql", "mssql")):
        _prepared.add(uri)  # a server (http) or a platform: it manages its own schema
        return
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    if path is None:
        SqlAlchemyStore(uri, "./mlruns")
    else:
        root = artifact_root(uri)
        with file_lock(path.with_name(path.name + ".lock")):
            root.mkdir(parents=True, exist_ok=True)
            copied = not path.exists() and _copy_schema(path)
            try:
                SqlAlchemyStore(uri, str(root))
            except Exception:
                if not copied:
                    raise
                # A template MLflow does not accept: forget its engine, migrate from scratch.
                engine = getattr(SqlAlchemyStore, "_engine_map", {}).pop(uri, None)
                if engine is not None:
                    engine.dispose()
                path.unlink()
                SqlAlchemyStore(uri, str(root))
    _prepared.add(uri)


def schema_template() -> Path:
    """Where this MLflow version's empty, migrated sqlite schema is kept, once per machine."""
    import mlflow

    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlexp"
    return base / f"mlflow-{mlflow.__version__}-schema.db"


def _copy_schema(path: Path) -> bool:
    """A new sqlite store starts as a copy of an empty store MLflow migrated before: MLflow
    builds a schema by running each of its ~60 migrations (1.75 s on a 2-core CPU, in every
    new store: every sweep dir and test dir), opening a migrated one takes 0.07 s. The
    template holds no experiment: SqlAlchemyStore creates `Default` in the copy, with the
    copy's own artifact root. False (MLflow migrates as usual) when no template can be made."""

    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore

    template = schema_template()
    try:
        if not _usable(template):
            with file_lock(template.with_name(template.name + ".lock")):
                if not _usable(template):
                    tmp = template.with_name(f".{template.name}.{os.getpid()}")
                    tmp.unlink(missing_ok=True)
                    store = SqlAlchemyStore(f"sqlite:///{tmp}", str(tmp.parent / "unused"))
                    store.engine.dispose()
                    with sqlite3.connect(tmp) as db:  # Default is made by each copy's store
                        db.execute("DELETE FROM experiment_tags")
                        db.execute("DELETE FROM experiments")
                    db.close()
                    os.replace(tmp, template)
        part = path.with_name(f".{path.name}.{os.getpid()}")
        shutil.copyfile(template, part)
        os.replace(part, path)
        return True
    except Exception:  # read-only home, disk full: MLflow creates the schema itself
        return False


def _usable(template: Path) -> bool:
    """A sqlite file with MLflow's revision table and no experiment (not a torn copy)."""

    if not template.is_file():
        return False
    try:
        with sqlite3.connect(f"file:{template}?mode=ro", uri=True) as db:
            ok = bool(db.execute("SELECT version_num FROM alembic_version").fetchall()) and \
                not db.execute("SELECT 1 FROM experiments").fetchall()
        db.close()
        return ok
    except sqlite3.Error:
        return False


def client(uri: str) -> "MlflowClient":
    from mlflow import MlflowClient

    if uri.startswith(("http://", "https://")):
        for key, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)

        if redact_uri(uri) != uri:  # MLflow's "View run at <url>" line would print them
            os.environ["MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"] = "true"
    return MlflowClient(tracking_uri=uri)


def slug(name: str) -> str:
    return re.sub(r"[^\w.\-]+", "_", name).strip("._") or "experiment"


# MLflow's experiment type (mlflow/demo/generators/traces.py sets "genai_development"; the
# UI's ExperimentKind enum has custom_model_development for model training): rlexp's
# experiments are training experiments, not GenAI apps.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def experiment_id(mlflow_client: "MlflowClient", name: str, uri: str) -> str:
    """Id of experiment `name`, created (artifacts next to a sqlite db) or restored if needed,
    and typed as a model-training experiment."""
    from mlflow.exceptions import MlflowException

    exp = mlflow_client.get_experiment_by_name(name)
    if exp is None:
        root = artifact_root(uri)
        location = str(root / slug(name)) if root is not None else None
        try:
            return mlflow_client.create_experiment(name, artifact_location=location,
                                                   tags=EXPERIMENT_KIND)
        except MlflowException as exc:  # another job created it a moment ago
            if exc.error_code != "RESOURCE_ALREADY_EXISTS":
                raise
            exp = mlflow_client.get_experiment_by_name(name)
    if exp.lifecycle_stage == "deleted":
        mlflow_client.restore_experiment(exp.experiment_id)
    if "mlflow.experimentKind" not in exp.tags:  # made by an older rlexp or by hand
        for key, value in EXPERIMENT_KIND.items():
            mlflow_client.set_experiment_tag(exp.experiment_id, key, value)
    return exp.experiment_id


def sanitize_key(key: str) -> str:
    """A valid MLflow param/metric/tag name: allowed characters, no path tricks, <= 250."""
    cleaned = _BAD_KEY_CHARS.sub("_", str(key))
    parts = [p for p in cleaned.split("/") if p not in ("", ".", "..")]
    return ("/".join(parts) or "_")[:MAX_KEY_LEN]


def truncate(value: object, limit: int) -> str:
    text = "None" if value is None else str(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = f"{type(exc).__name__}: {text.splitlines()[0] if text else ''}"
    return line if len(line) <= 200 else line[:197] + "..."


# Tag every run carries: the absolute run dir it logs from (how a lost link is found again).
RUN_DIR_TAG = "rlexp.run_dir"


def find_run(mlflow_client: "MlflowClient", experiment: str, run_dir: Path,
             hint: str | None = None) -> str | None:
    """The MLflow run of `run_dir` when its tracking.json is lost: `hint` (summary.json's
    mlflow_run_id) if the store has it for this dir, else the newest run tagged with the dir."""
    from mlflow.exceptions import MlflowException

    where = str(Path(run_dir).resolve())
    if hint:
        try:
            run = mlflow_client.get_run(hint)
            if run.data.tags.get(RUN_DIR_TAG) in (None, where):
                return hint
        except MlflowException:
            pass  # deleted, or another store's id: search by the dir instead
    exp = mlflow_client.get_experiment_by_name(experiment)
    if exp is None:
        return None
    quoted = where.replace("\\", "\\\\").replace("'", "\\'")
    runs = mlflow_client.search_runs([exp.experiment_id],
                                     filter_string=f"tags.`{RUN_DIR_TAG}` = '{quoted}'",
                                     order_by=["attributes.start_time DESC"], max_results=1)
    return runs[0].info.run_id if runs else None


def max_logged_step(mlflow_client: "MlflowClient", run_id: str) -> int:
    """Highest step of any metric the run has (-1 when none)."""
    keys = mlflow_client.get_run(run_id).data.metrics
    steps = [m.step for key in keys for m in mlflow_client.get_metric_history(run_id, key)]
    return max(steps, default=-1)
