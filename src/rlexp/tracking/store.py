"""Where the MLflow store is, creating it once, and the MLflow limits we write within. mlflow
(2.3 s) is imported inside functions only: `python -m rlexp --help` and Hydra's callback loading
must stay fast. tracking.warm_up imports it on a thread while the engine builds; pre-flight
needs it only to probe an http store (classify)."""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import re
import socket
import sqlite3
import ssl
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Iterator
from urllib.parse import unquote, urlsplit

from rlexp.base.errors import UserError
from rlexp.base.files import replace, temp_sibling
from rlexp.base.lock import flocked
from rlexp.base.redact import MASK, redact_text, redact_uri, remember, unmask

if TYPE_CHECKING:
    from mlflow import MlflowClient

    from rlexp.config.schema import Config

DEFAULT_DB = Path("outputs") / "mlflow.db"  # default store, relative to the command's cwd
ARTIFACTS_DIR = "mlartifacts"  # a sqlite store's artifacts: this folder beside the db
# MLflow limits (mlflow.utils.validation), copied so callers need not import mlflow.
MAX_KEY_LEN = 250
MAX_PARAM_VAL_LEN = 6000
MAX_TAG_VAL_LEN = 8000
MAX_METRICS_PER_BATCH = 1000
MAX_PARAMS_TAGS_PER_BATCH = 100
# HTTP stores: MLflow's defaults retry for minutes (7 retries, backoff 2 s); a tracker must
# fail fast and spool instead of stalling training. A user's own settings win.
HTTP_DEFAULTS = {"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "1", "MLFLOW_HTTP_REQUEST_BACKOFF_FACTOR": "1",
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
    # placeholders of secrets kept out of Hydra's files (redact.mask_argv) back to real ones
    uri = unmask(uri or os.environ.get("MLFLOW_TRACKING_URI") or f"sqlite:///{DEFAULT_DB}")
    path = sqlite_path(uri)
    if path is None:
        return uri
    query = uri.partition("?")[2]
    return f"sqlite:///{path.resolve()}" + (f"?{query}" if query else "")


def unmasked(saved: str, where: str) -> str:
    """A URI a file keeps with its credentials masked (tracking.json, parent_run.json), whole
    again from $MLFLOW_TRACKING_URI when that names the same store; else a UserError."""
    if MASK not in saved:
        return saved
    env = os.environ.get("MLFLOW_TRACKING_URI", "")
    if not env or redact_uri(env) != redact_uri(saved.replace(MASK, "x")):
        raise UserError(f"{where} names {redact_uri(saved)} with its credentials masked: pass "
                        "the full URI with --uri (or set MLFLOW_TRACKING_URI)")
    return env


def default_uri(cfg: "Config") -> str | None:
    """The tracking URI of a run, or None when tracking is off (tracker=none)."""
    return None if cfg.tracker.name == "none" else resolve_uri(cfg.tracker.uri)


def artifact_root(uri: str) -> Path | None:
    """Local artifact root of a sqlite store (<db dir>/mlartifacts); None = the server decides."""
    path = sqlite_path(uri)
    return path.parent / ARTIFACTS_DIR if path is not None else None


def prepare_store(uri: str) -> None:
    """Create or upgrade a database store once before jobs start (~25 ms if it exists): jobs
    creating one at once race in MLflow's migration and can break it, hence the file lock."""
    try:
        ensure_store(uri)
    except UserError:
        raise
    except Exception as exc:  # the listener spools and retries
        print(f"rlexp: warning: could not prepare the MLflow store {redact_uri(uri)}: "
              f"{first_line(exc)}", flush=True)


_background: dict[str, threading.Thread] = {}


def warm_up(cfg: "Config") -> None:
    """ensure_store on a thread while the engine builds (JAX, mostly outside the GIL): the MLflow
    import (2.5 s) and a new store (0.3 s) leave the path to step 1; wait_prepared reports it."""
    uri = default_uri(cfg)
    if uri is None or uri in _prepared or uri in _background:
        return

    def prepare() -> None:
        with contextlib.suppress(Exception):  # the listener's own ensure_store says it
            ensure_store(uri)

    # Not a daemon: a job that exits early (bad input found while building) waits for the
    # schema migration to end instead of leaving a half-migrated store.
    thread = threading.Thread(target=prepare, name="rlexp-mlflow-store", daemon=False)
    _background[uri] = thread
    thread.start()


def wait_prepared(uri: str) -> None:
    if (thread := _background.pop(uri, None)) is not None:
        thread.join()


def ensure_store(uri: str) -> None:
    """prepare_store that raises: what a writer calls before its first write."""
    if uri in _prepared:
        return
    file_store = uri.startswith("file:") or "://" not in uri and not uri.startswith("databricks")
    if file_store and os.environ.get("MLFLOW_ALLOW_FILE_STORE", "").lower() != "true":
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
        with flocked(path.with_name(path.name + ".lock")):
            root.mkdir(parents=True, exist_ok=True)
            if not path.exists():
                _copy_schema(path, root)
            SqlAlchemyStore(uri, str(root))
    _prepared.add(uri)


# How long classify() waits for a name lookup and for the store's answer: a store that is
# down costs the start of a run at most this (a refused connection answers at once).
PROBE_TIMEOUT_S = 3.0
# What classify() asks an http store: cheap, read-only, authenticated like every write.
PROBE_ENDPOINT = "/api/2.0/mlflow/experiments/search?max_results=1"
# Servers a tracking URI can name that classify() probes, and their default ports.
PORTS = {"http": 80, "https": 443, "postgresql": 5432, "mysql": 3306}
# Name lookup errors that mean the name does not exist (not: the resolver is unreachable).
_NO_SUCH_NAME = {getattr(socket, n) for n in ("EAI_NONAME", "EAI_NODATA", "EAI_FAIL",
                                              "EAI_ADDRFAMILY") if hasattr(socket, n)}
_classified: dict[str, str] = {}


def classify(uri: str, timeout: float = PROBE_TIMEOUT_S, cache: bool = True) -> str:
    """What a tracking store is now: "ok", "down: <why>" or "wrong: <why>" (never raises).
    down: may come back; a run spools, `rlexp.sync` sends later (refused connection, no answer,
      no resolver, HTTP 5xx/429 from a proxy in front of a stopped server).
    wrong: no run can ever log there; refused at start (host name not resolving, not MLflow's REST
      API, HTTP 401/403, TLS, a sqlite path with a missing directory, not a database or read-only).
    A database server is probed with a name lookup and a TCP connection. Kept per URI for this
    process (a sweep's jobs share one probe) unless cache=False (rlexp.sync asks again)."""
    remember(uri)
    if cache and uri in _classified:
        return _classified[uri]
    try:
        found = _classify(uri, timeout)
    except Exception as exc:  # a probe that breaks says nothing about the store
        found = f"ok (not probed: {type(exc).__name__})"
    if cache:
        _classified[uri] = found
    return found


# URI schemes MLflow 3 logs to (a dialect may name its driver); it refuses `file:` itself.
TRACKING_SCHEMES = ("sqlite", "http", "https", "databricks", "postgresql", "mysql", "mssql")


def check_scheme(key: str, uri: str) -> None:
    """UserError naming `key` when `uri` is no store MLflow 3 can use, by its scheme alone."""
    if uri.lower() in ("databricks", "databricks-uc"):  # a Databricks workspace, no path
        return
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower() if ":" in uri else ""
    if scheme == "file" or not scheme:
        raise UserError(f"{key}={redact_uri(uri)} is a file store, which MLflow 3 refuses; "
                        "use sqlite:///path/mlflow.db or http://host:port")
    if scheme not in TRACKING_SCHEMES:
        raise UserError(f"{key}={redact_uri(uri)}: unknown scheme '{scheme}'; valid schemes are "
                        f"{', '.join(TRACKING_SCHEMES)} (a database may add its driver: "
                        "postgresql+psycopg2://)")


def check_readable(key: str, uri: str) -> None:
    """For the commands that read a store (rlexp.report, rlexp.ui): one line, before MLflow's
    retries and traceback, when it cannot be read now: a bad scheme, down or wrong."""
    check_scheme(key, uri)
    state = classify(uri)
    if is_down(state) or is_wrong(state):
        raise UserError(f"{key}={redact_uri(uri)} cannot be read: {state}")


def is_wrong(state: str) -> bool:
    return state.startswith("wrong")


def is_down(state: str) -> bool:
    return state.startswith("down")


def _classify(uri: str, timeout: float) -> str:
    scheme = uri.split(":", 1)[0].split("+", 1)[0].lower() if ":" in uri else ""
    if scheme == "sqlite":
        return _classify_sqlite(uri)
    if scheme not in PORTS:
        return "ok"  # databricks, mssql (often a DSN name), a plugin's scheme: not probed
    parts = urlsplit(uri)
    try:
        host, port = parts.hostname, parts.port or PORTS[scheme]
    except ValueError:
        return f"wrong: the port in {redact_uri(parts.netloc)} is not a number"
    if scheme in ("http", "https"):
        return _classify_http(uri, parts.scheme, host, port, timeout)
    if not host:
        return "ok"  # a database on a local socket (?host=/var/run/postgresql)
    if (why := _lookup(host, port, timeout)) is not None:
        return why
    try:
        socket.create_connection((host, port), timeout=timeout).close()
    except OSError as exc:
        return _network_error(exc, f"{host}:{port}", timeout)
    return "ok"


def _classify_sqlite(uri: str) -> str:
    path = sqlite_path(resolve_uri(uri))
    if path is None:
        return "ok"  # sqlite:// (in memory)
    if path.parent == (Path.cwd() / DEFAULT_DB).parent and path.parent.parent.is_dir():
        return "ok"  # the default store's outputs/ is made with it
    if path.is_dir():
        return f"wrong: {path} is a directory, not a database file"
    if not path.parent.is_dir():
        why = "is a file" if path.parent.exists() else "does not exist"
        return (f"wrong: its directory {path.parent} {why} (a typo? create the directory "
                f"first: rlexp does not make it)")
    if path.exists():
        try:
            with open(path, "rb") as handle:
                head = handle.read(16)
        except OSError as exc:
            return f"wrong: cannot read {path} ({exc.strerror})"
        if head and head != b"SQLite format 3\x00":
            return f"wrong: {path} is not an SQLite database"
        if not os.access(path, os.R_OK | os.W_OK):
            return f"wrong: {path} is not writable (permission denied)"
    elif not os.access(path.parent, os.W_OK | os.X_OK):
        return f"wrong: cannot create a database in {path.parent} (permission denied)"
    return "ok"


def _lookup(host: str, port: int, timeout: float) -> str | None:
    """None when `host` resolves, else 'down/wrong: ...'; on a thread (a mute resolver: 10 s+)."""
    result: dict[str, BaseException] = {}

    def look() -> None:
        try:
            socket.getaddrinfo(host, port, type=socket.SOCK_STREAM)
        except BaseException as exc:  # reported below
            result["error"] = exc

    thread = threading.Thread(target=look, name="rlexp-store-lookup", daemon=True)
    thread.start()
    thread.join(timeout)
    if thread.is_alive():
        return f"down: the name lookup of {host} did not answer within {timeout:g}s"
    return _lookup_failed(host, result["error"]) if result else None


def _lookup_failed(host: str, exc: BaseException) -> str:
    if isinstance(exc, socket.gaierror) and exc.errno in _NO_SUCH_NAME:
        return f"wrong: host {host} does not resolve ({exc.strerror}; a typo in the address?)"
    return f"down: the name lookup of {host} failed ({getattr(exc, 'strerror', None) or exc})"


def _chain(exc: BaseException) -> Iterator[BaseException]:
    """`exc` and its wrapped causes (MlflowException > requests > urllib3 `reason` > socket/ssl)."""
    todo, seen = [exc], set()
    while todo:
        e = todo.pop(0)
        if id(e) in seen:
            continue
        seen.add(id(e))
        yield e
        inner = [e.__cause__, e.__context__, getattr(e, "reason", None), *e.args]
        todo += [x for x in inner if isinstance(x, BaseException)]


def _network_error(exc: BaseException, where: str, timeout: float) -> str:
    import http.client
    chain = list(_chain(exc))
    found = lambda *types: next((e for e in chain if isinstance(e, types)), None)  # noqa: E731
    if tls := found(ssl.SSLError, ssl.CertificateError):
        return f"wrong: TLS with {where} failed ({getattr(tls, 'reason', None) or tls})"
    if lookup := found(socket.gaierror):
        return _lookup_failed(where.rsplit(":", 1)[0], lookup)
    if found(ConnectionRefusedError):
        return f"down: {where} refused the connection (nothing listens there now)"
    if any(isinstance(e, TimeoutError) or "Timeout" in type(e).__name__ for e in chain):
        return f"down: {where} did not answer within {timeout:g}s"
    if closed := found(ConnectionError):  # RemoteDisconnected too
        return f"down: {where} closed the connection ({type(closed).__name__})"
    if garbled := found(http.client.HTTPException):  # BadStatusLine: something else listens
        return f"wrong: {where} does not answer in HTTP ({type(garbled).__name__})"
    last = chain[-1]
    return f"down: {where} cannot be reached ({getattr(last, 'strerror', None) or last})"


def _classify_http(uri: str, scheme: str, host: str | None, port: int, timeout: float) -> str:
    """One GET of PROBE_ENDPOINT via mlflow.utils.rest_utils (the writes' auth, TLS, proxies)."""
    import urllib.request
    if not host:
        return "wrong: the URI names no host (http://host:port)"
    where = f"{host}:{port}"
    proxied = bool(urllib.request.getproxies().get(scheme)) and \
        not urllib.request.proxy_bypass(host)
    # behind a proxy the proxy resolves the name
    if not proxied and (why := _lookup(host, port, timeout)) is not None:
        return why
    from mlflow.utils.credentials import get_default_host_creds
    from mlflow.utils.rest_utils import http_request
    try:
        response = http_request(get_default_host_creds(uri), PROBE_ENDPOINT, "GET",
                                max_retries=0, backoff_factor=0, timeout=timeout,
                                raise_on_status=False)
        body = response.content[:65536]
    except Exception as exc:  # timeouts while reading, a reset, not HTTP at all
        return _network_error(exc, where, timeout)
    return _judge_answer(response.status_code, response.headers.get("Content-Type", ""), body)


def _judge_answer(status: int, content_type: str, body: bytes) -> str:
    try:
        data = json.loads(body.decode("utf-8")) if body.strip() else None
    except ValueError:
        data = None
    if status in (401, 403):
        return (f"wrong: the store refused access (HTTP {status}): check the credentials "
                f"(user:password in the URI, MLFLOW_TRACKING_USERNAME/PASSWORD or "
                f"MLFLOW_TRACKING_TOKEN)")
    if status >= 500 or status in (408, 429):
        return f"down: the store answered HTTP {status} (a server that is stopping or busy)"
    if isinstance(data, dict) and (200 <= status < 300 or "error_code" in data):
        return "ok"  # MLflow's JSON: its answer, or its own error
    what = "an HTML page" if "html" in content_type.lower() or body.lstrip()[:1] == b"<" \
        else f"HTTP {status} {content_type or 'without a content type'}"
    return (f"wrong: it answers with {what}, not MLflow's REST API (HTTP {status} for "
            f"{PROBE_ENDPOINT.split('?')[0]}; the address of something else, or a path "
            f"MLflow does not serve?)")


def schema_template() -> Path:
    """Where this MLflow version's empty, migrated sqlite schema is kept, once per machine."""
    import mlflow
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "rlexp"
    return base / f"mlflow-{mlflow.__version__}-schema.db"


def _copy_schema(path: Path, root: Path) -> None:
    """A new sqlite store starts as a copy of an empty store MLflow migrated before: its ~60
    migrations take 1.75 s on a 2-core CPU in every new store (every sweep and test dir), opening a
    migrated one 0.07 s. The template holds no experiment: MLflow opens the copy under a temporary
    name (creating `Default` with the store's artifact root) and takes the store's name only if
    MLflow accepted it. No template: MLflow migrates as usual."""
    from mlflow.store.tracking.sqlalchemy_store import SqlAlchemyStore
    template = schema_template()
    part = temp_sibling(path)
    try:
        if not _usable(template):
            with flocked(template.with_name(template.name + ".lock")):
                if not _usable(template):
                    tmp = temp_sibling(template)
                    tmp.unlink(missing_ok=True)
                    SqlAlchemyStore(f"sqlite:///{tmp}", str(tmp.parent / "unused")).engine.dispose()
                    with sqlite3.connect(tmp) as db:  # Default is made by each copy's store
                        db.execute("DELETE FROM experiment_tags")
                        db.execute("DELETE FROM experiments")
                    db.close()
                    replace(tmp, template)
        part.write_bytes(template.read_bytes())
        SqlAlchemyStore(f"sqlite:///{part}", str(root)).engine.dispose()
        replace(part, path)
    except Exception:  # read-only home, disk full, a template MLflow refuses
        pass
    finally:
        part.unlink(missing_ok=True)


def _usable(template: Path) -> bool:
    """A sqlite file with MLflow's revision table and no experiment (not a torn copy)."""
    if not template.is_file():
        return False
    try:
        with contextlib.closing(sqlite3.connect(f"file:{template}?mode=ro", uri=True)) as db:
            return bool(db.execute("SELECT version_num FROM alembic_version").fetchall()) and \
                not db.execute("SELECT 1 FROM experiments").fetchall()
    except sqlite3.Error:
        return False


def client(uri: str) -> "MlflowClient":
    from mlflow import MlflowClient
    remember(uri)  # its credentials are masked in every line, also inside MLflow's errors
    if uri.startswith(("http://", "https://")):
        for key, value in HTTP_DEFAULTS.items():
            os.environ.setdefault(key, value)

    # MLflow prints "🏃 View run NAME at: URL" and "🧪 View experiment at: URL" each time a run of
    # an http store ends (tracking/_tracking_service/client.py, _log_url): rlexp says the link
    # once itself (links.run_link). Forced where the URL has credentials.
    quiet = "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT"
    os.environ[quiet] = "true" if redact_uri(uri) != uri else os.environ.get(quiet, "true")
    return MlflowClient(tracking_uri=uri)


def slug(name: str, limit: int = 255) -> str:
    """A dir name for experiment `name` of at most `limit` bytes (NAME_MAX 255: longer failed with
    `[Errno 36] File name too long`); a cut one ends with a digest of the whole."""
    text = re.sub(r"[^\w.\-]+", "_", name).strip("._") or "experiment"
    if len(text.encode()) <= limit:
        return text
    digest = hashlib.sha1(name.encode()).hexdigest()[:10]
    head = text.encode()[:limit - len(digest) - 1].decode(errors="ignore")
    return f"{head}-{digest}"


# MLflow error codes of a store that answered and refused a write (its sqlalchemy store raises
# a database constraint error as BAD_REQUEST): not an outage, so not "unreachable".
REFUSALS = ("BAD_REQUEST", "INVALID_PARAMETER_VALUE", "RESOURCE_ALREADY_EXISTS",
            "RESOURCE_DOES_NOT_EXIST", "INVALID_STATE", "PERMISSION_DENIED")


def name_max(folder: Path) -> int:
    """The longest file name (bytes) `folder`'s filesystem takes; 255 when it cannot be asked."""
    probe = Path(folder).absolute()
    while not probe.exists() and probe != probe.parent:
        probe = probe.parent
    try:
        return int(os.pathconf(probe, "PC_NAME_MAX"))
    except (OSError, ValueError):
        return 255


# errno values of a write that will fail the same way every time (a name the filesystem cannot
# take, a permission, a read-only or vanished path): not an outage, so not retried.
_LASTING_ERRNOS = frozenset({errno.ENAMETOOLONG, errno.EACCES, errno.EPERM, errno.EROFS,
                             errno.EISDIR, errno.ENOTDIR, errno.EINVAL, errno.ELOOP,
                             errno.ENOENT, errno.EEXIST})


def is_outage(exc: BaseException) -> bool:
    """Whether a failed write may succeed later (only an outage is retried): not when the store
    refused it (REFUSALS) or its filesystem failed it for good ([Errno 36] File name too long)."""
    seen: set[int] = set()
    cause: BaseException | None = exc
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if getattr(cause, "error_code", None) in REFUSALS:
            return False
        transient = isinstance(cause, (ConnectionError, TimeoutError, socket.gaierror))
        if isinstance(cause, OSError) and not transient and cause.errno in _LASTING_ERRNOS:
            return False
        cause = cause.__cause__ or cause.__context__
    return True


# MLflow's experiment type (mlflow/demo/generators/traces.py sets "genai_development"; the UI's
# ExperimentKind has custom_model_development for training): rlexp's are not GenAI apps.
EXPERIMENT_KIND = {"mlflow.experimentKind": "custom_model_development"}


def experiment_id(mlflow_client: "MlflowClient", name: str, uri: str) -> str:
    """Id of experiment `name`, created or restored if needed, typed as model training."""
    from mlflow.exceptions import MlflowException
    exp = mlflow_client.get_experiment_by_name(name)
    if exp is None:
        root = artifact_root(uri)
        location = str(root / slug(name, name_max(root))) if root is not None else None
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
    """`Type: first line of the message`, at most 200 characters, secrets masked before the cut
    (MLflow's errors repeat the URL with credentials; a cut URI would no longer look like one)."""
    text = redact_text(str(exc).strip())
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
    if hint:  # a hint deleted, or another store's id: search by the dir instead
        with contextlib.suppress(MlflowException):
            if mlflow_client.get_run(hint).data.tags.get(RUN_DIR_TAG) in (None, where):
                return hint
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
