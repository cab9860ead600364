"""What MLflow itself would print stays off the console: the "🏃 View run NAME at: URL" and
"🧪 View experiment at: URL" lines of an http store (rlexp prints its own link once), and the
system-metrics monitor's warnings (they go to the job's log file)."""

from __future__ import annotations

import json
import logging
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from rlexp.tracking import store
from rlexp.tracking.listener import SYSTEM_METRICS_LOGGER, log_file_only

INFO = {"run_id": "r1", "run_uuid": "r1", "experiment_id": "1", "run_name": "planted-name",
        "status": "FINISHED", "lifecycle_stage": "active", "artifact_uri": "mlflow-artifacts:/x",
        "start_time": 1, "end_time": 2, "user_id": "u"}


class _Rest(BaseHTTPRequestHandler):
    """Just enough of MLflow's REST API for MlflowClient.set_terminated (runs/update, then
    runs/get for the link it prints)."""

    def _answer(self) -> None:
        body = {"run_info": INFO} if "runs/update" in self.path else \
            {"run": {"info": INFO, "data": {}}}
        data = json.dumps(body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802 - http.server's names
        self._answer()

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        self.rfile.read(length)
        self._answer()

    def log_message(self, *args) -> None:
        pass


def test_mlflow_prints_no_view_run_line_for_rlexps_clients(capfd, monkeypatch):
    monkeypatch.delenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", raising=False)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Rest)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        store.client(url).set_terminated("r1", "FINISHED")
        out = capfd.readouterr()
        assert "View run" not in out.out + out.err and "View experiment" not in out.out
        # MLflow's own default, for contrast: the line this keeps off the console.
        monkeypatch.setenv("MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT", "false")
        from mlflow import MlflowClient

        MlflowClient(url).set_terminated("r1", "FINISHED")
        assert "View run planted-name at:" in capfd.readouterr().out
    finally:
        server.shutdown()


def test_system_metrics_warnings_go_to_the_log_file_not_the_console(tmp_path, capfd):
    import mlflow  # noqa: F401 - configures its loggers (their own stderr handler)

    root = logging.getLogger()
    handler = logging.FileHandler(tmp_path / "rlexp.log")
    root.addHandler(handler)
    logger = logging.getLogger(SYSTEM_METRICS_LOGGER)
    saved = logger.handlers[:], logger.propagate
    try:
        log_file_only(SYSTEM_METRICS_LOGGER)
        log_file_only(SYSTEM_METRICS_LOGGER)  # idempotent: one line in the file, not two
        logging.getLogger(f"{SYSTEM_METRICS_LOGGER}.system_metrics_monitor").warning(
            "Failed to log system metrics: planted, this is expected if the run is terminated")
        handler.flush()
        err = capfd.readouterr().err
        assert "planted" not in err, err
        assert (tmp_path / "rlexp.log").read_text().count("Failed to log system metrics") == 1
    finally:
        root.removeHandler(handler)
        handler.close()
        logger.handlers, logger.propagate = saved
