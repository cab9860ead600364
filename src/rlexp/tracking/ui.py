"""The MLflow UI on this machine: `python -m rlexp.ui [--port N] [--uri URI]`.

Serves the runs' store (a missing sqlite one is refused, never created) on 127.0.0.1 with MLflow's
fastapi_app in this process, job execution off: it starts in seconds, in ~0.5 GB. MLflow 3.17's UI
shows the GenAI view unless localStorage or the URL's `?workflowType=` says otherwise, and in-app
links drop that parameter: the index served here saves the URL's choice, else machine_learning."""

from __future__ import annotations

import errno
import logging
import os
import signal
import socket
import sys
import warnings
from pathlib import Path

from rlexp.base.errors import OneLineParser, UserError, fail
from rlexp.tracking import store
from rlexp.tracking.links import TRAINING_VIEW, announce_ui, withdraw_ui

# mlflow's server app (~3 s) is imported once the arguments and the port are checked.

HOST = "127.0.0.1"
# MLflow 3.17 server/js useLocalStorage: key "<key>_v<version>", value JSON.
WORKFLOW_KEY = "mlflow.workflowType_v1"
KEEP_TRAINING_VIEW = (
    "<script>(function(){try{var k=%r,m=/[?&]workflowType=(genai|machine_learning)/"
    ".exec(location.hash+location.search);if(m){localStorage.setItem(k,JSON.stringify(m[1]))}"
    "else if(!localStorage.getItem(k)){localStorage.setItem(k,'\"machine_learning\"')}}"
    "catch(e){}})();</script>" % WORKFLOW_KEY)
# Start-up warnings with nothing to act on (prefixes): MLflow 3.17 imports a deprecated module.
QUIET_WARNINGS = ("starlette.middleware.wsgi is deprecated",)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def port_taken(port: int) -> bool:
    """True when something listens on HOST:port (binding it fails with EADDRINUSE)."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT is free
        try:
            sock.bind((HOST, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


def with_training_view(index_html: str) -> str:
    """MLflow's index.html with the script that keeps the model-training view."""
    if "<head>" not in index_html:
        return KEEP_TRAINING_VIEW + index_html
    return index_html.replace("<head>", "<head>" + KEEP_TRAINING_VIEW, 1)


def experiment_links(uri: str, base: str, limit: int = 5) -> list[str]:
    """'<name>: <url>' per experiment with runs, newest first; [] when the store is unreadable."""
    try:
        client = store.client(uri)
        experiments = client.search_experiments(order_by=["last_update_time DESC"])
    except Exception:
        return []
    links = []
    for exp in experiments:
        if not client.search_runs([exp.experiment_id], max_results=1):
            continue  # the empty Default experiment
        links.append(f"{exp.name}: {base}/#/experiments/{exp.experiment_id}?{TRAINING_VIEW}")
        if len(links) == limit:
            break
    return links


def server_app(uri: str):
    """MLflow's server app for `uri` (as `mlflow server`), its index keeping the training view."""
    from mlflow.server.constants import (ARTIFACT_ROOT_ENV_VAR, ARTIFACTS_DESTINATION_ENV_VAR,
                                         BACKEND_STORE_URI_ENV_VAR, REGISTRY_STORE_URI_ENV_VAR,
                                         SERVE_ARTIFACTS_ENV_VAR)
    os.environ.setdefault("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")
    os.environ.update({BACKEND_STORE_URI_ENV_VAR: uri, REGISTRY_STORE_URI_ENV_VAR: uri,
                       SERVE_ARTIFACTS_ENV_VAR: "true",
                       ARTIFACT_ROOT_ENV_VAR: "mlflow-artifacts:/"})
    root = store.artifact_root(uri)
    if root is not None:  # new experiments made in the UI keep artifacts next to the db
        os.environ[ARTIFACTS_DESTINATION_ENV_VAR] = str(root)
    with warnings.catch_warnings():
        for message in QUIET_WARNINGS:
            warnings.filterwarnings("ignore", message=message)
        import mlflow.server
        from mlflow.server.fastapi_app import app as mlflow_app
        from mlflow.server.handlers import initialize_backend_stores
        from starlette.responses import HTMLResponse

    initialize_backend_stores(uri, uri, "mlflow-artifacts:/")
    index = Path(mlflow.server.app.static_folder) / "index.html"
    page = with_training_view(index.read_text()) if index.is_file() else None

    async def app(scope, receive, send):
        if page is not None and scope["type"] == "http" and scope["path"] in ("/", "/index.html"):
            response = HTMLResponse(page, headers={"Cache-Control": "no-cache"})
            await response(scope, receive, send)
            return
        await mlflow_app(scope, receive, send)

    return app


def main(argv: list[str] | None = None) -> int:
    parser = OneLineParser(prog="python -m rlexp.ui", description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=5000, help="port (0 = any free port)")
    parser.add_argument("--uri", help="tracking URI (default: as for runs)")
    args = parser.parse_args(argv)
    uri = store.resolve_uri(args.uri)
    if uri.startswith(("http://", "https://")):
        print(f"rlexp.ui: the store is already a server: {uri}")
        return 0
    if args.port < 0 or args.port > 65535:
        fail(f"--port {args.port} is not a port: use --port N with 1 <= N <= 65535, or "
             "--port 0 for any free one")
    if args.port and port_taken(args.port):
        fail(f"port {args.port} on {HOST} is taken (another MLflow UI or server?): use "
             "--port N with a free port, or --port 0 for any free one")
    db = store.sqlite_path(uri)
    if db is not None and not db.exists():  # as rlexp.report: reading never creates a store
        fail(f"no MLflow store at {db} (use --uri or $MLFLOW_TRACKING_URI)")
    try:
        store.check_readable("--uri", uri)  # before the address is printed
        store.prepare_store(uri)
    except UserError as exc:
        fail(str(exc))
    port = args.port or free_port()
    base = f"http://{HOST}:{port}"
    print(f"MLflow UI: {base}/#/experiments?{TRAINING_VIEW}  (store {uri}; Ctrl-C stops it)",
          flush=True)
    for link in experiment_links(uri, base):
        print(f"  {link}", flush=True)
    import uvicorn
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    app = server_app(uri)
    announced = announce_ui(uri, base)
    # uvicorn stops on SIGINT and SIGTERM, then raises the signal again with the handler it
    # found: exit through Python's own exits so the announcement is withdrawn.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    try:
        uvicorn.run(app, host=HOST, port=port, log_level="warning", access_log=False)
    except KeyboardInterrupt:
        pass
    finally:
        withdraw_ui(announced)
    return 0


if __name__ == "__main__":
    sys.exit(main())
