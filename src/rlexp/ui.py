"""The MLflow UI on this machine: `python -m rlexp.ui [--port N] [--uri URI]`.

Serves the same store runs log to (tracker.uri, else $MLFLOW_TRACKING_URI, else
outputs/mlflow.db under the current directory) on 127.0.0.1, with one worker and MLflow's
job execution off (starts in seconds, ~0.5 GB). Prints the URL; Ctrl-C stops it.
"""

from __future__ import annotations

import argparse
import os
import signal
import socket
import subprocess
import sys

from rlexp.errors import UserError, fail
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
    print(f"MLflow UI: http://{HOST}:{port}  (store {uri}; Ctrl-C stops it)", flush=True)
    # SIGTERM (a test, a supervisor) stops the server as Ctrl-C does.
    signal.signal(signal.SIGTERM, lambda *_: proc.terminate())
    try:
        return proc.wait()
    except KeyboardInterrupt:
        proc.terminate()
        return proc.wait()


if __name__ == "__main__":
    sys.exit(main())
