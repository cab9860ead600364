"""The MLflow UI on this machine: `python -m rlexp.ui [--port N] [--uri URI]`.

Serves the same store runs log to (tracker.uri, else $MLFLOW_TRACKING_URI, else
outputs/mlflow.db under the current directory) on 127.0.0.1, with one worker and MLflow's
job execution off (starts in seconds, ~0.5 GB). Prints the URL; Ctrl-C stops it.

MLflow 3.17's UI opens every experiment in its GenAI view (traces, "Evaluation runs") unless
the page asks for the model-training one: its workflow switch reads `?workflowType=` from the
URL, else the browser's saved choice (localStorage "mlflow.workflowType", GenAI by default);
the experiment's mlflow.experimentKind tag is not consulted. So the links printed here carry
workflowType=machine_learning (clicking "Model training" once also saves it in the browser).
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys

from rlexp.base.errors import UserError, fail
from rlexp.tracking import store

HOST = "127.0.0.1"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind((HOST, 0))
        return sock.getsockname()[1]


def server_command(uri: str, port: int) -> list[str]:
    cmd = [sys.executable, "-m", "mlflow", "server", "--backend-store-uri", uri,
           "--host", HOST, "--port", str(port), "--workers", "1"]
    root = store.artifact_root(uri)
    if root is not None:  # new experiments made in the UI keep artifacts next to the db
        cmd += ["--artifacts-destination", str(root)]
    return cmd


# The UI's workflow switch (MLflow 3.17 server/js: WorkflowType.MACHINE_LEARNING).
TRAINING_VIEW = "workflowType=machine_learning"


def experiment_links(uri: str, base: str, limit: int = 5) -> list[str]:
    """'<name>: <url>' of the store's experiments with runs, newest first, in the training
    view; [] when the store cannot be read (the server still starts)."""
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlexp.ui",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--port", type=int, default=5000, help="port (0 = any free port)")
    parser.add_argument("--uri", help="tracking URI (default: as for runs)")
    args = parser.parse_args(argv)
    uri = store.resolve_uri(args.uri)
    if uri.startswith(("http://", "https://")):
        print(f"rlexp.ui: the store is already a server: {uri}")
        return 0
    try:
        store.prepare_store(uri)
    except UserError as exc:
        fail(str(exc))
    port = args.port or free_port()
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION":
           os.environ.get("MLFLOW_SERVER_ENABLE_JOB_EXECUTION", "false")}
    proc = subprocess.Popen(server_command(uri, port), env=env)
    base = f"http://{HOST}:{port}"
    print(f"MLflow UI: {base}/#/experiments?{TRAINING_VIEW}  (store {uri}; Ctrl-C stops it)",
          flush=True)
    for link in experiment_links(uri, base):
        print(f"  {link}", flush=True)
    # SIGTERM (a test, a supervisor) stops the server as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
