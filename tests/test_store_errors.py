"""A tracking store that is down spools as ever; one that is wrong (a host name that does not
resolve, something that is not MLflow, 401/403, a sqlite file in a missing directory) is
refused at start in one line; secrets inside a store's URI (`user:PW@`, `?token=`, `&sig=`,
`X-Amz-Signature=`) reach no console line, log, file or store, exception text included; urllib3's
retries against a down store stay quiet. ("Reliability round three", items 3, 4 and 6.)

Stores here: "down" is a closed port on 127.0.0.1, "unreachable" a name under .invalid (which
never resolves), "wrong" a tiny http.server on 127.0.0.1 answering HTML, 401 or 403."""

from __future__ import annotations

import json
import logging
import socket
import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from rlexp.base.errors import UserError
from rlexp.base.redact import redact_text, remember
from rlexp.job.console import quiet_third_party
from rlexp.launch.preflight import preflight
from rlexp.tracking import store
from rlexp.tracking.listener import MlflowListener
from rlexp.tracking.spool import LINK_FILE, SPOOL_FILE
from rlexp.tracking.ui import free_port
from helpers import cli, cli_env, crash, info, metrics, one_line_exit_2
from sweep_helpers import TINY

PASSWORD = "PlantedPw4711"
TOKEN = "PlantedTok4712"
SIG = "PlantedSig4713"
AMZ = "PlantedAmz4714"
SECRETS = (PASSWORD, TOKEN, SIG, AMZ)
# Every kind of URI secret at once, after the store's address.
QUERY = f"?token={TOKEN}&sig={SIG}&X-Amz-Signature={AMZ}"


def with_secrets(base: str) -> str:
    """http://127.0.0.1:PORT -> http://alice:PW@127.0.0.1:PORT/?token=...&sig=...&X-Amz-..."""
    scheme, rest = base.split("://", 1)
    return f"{scheme}://alice:{PASSWORD}@{rest.rstrip('/')}/{QUERY}"


def quoted(uri: str) -> str:
    """The override as it must be typed: Hydra takes '=' and '&' only inside quotes."""
    return f'tracker.uri="{uri}"'


def assert_no_secret(text: str, where: str) -> None:
    for secret in SECRETS:
        assert secret not in text, f"{secret} in {where}: {text[-3000:]}"


def files_holding_secrets(root: Path) -> list[str]:
    """grep -r of a tree (run dirs, sweep dirs, a store's db and artifacts)."""
    found = []
    for path in root.rglob("*"):
        if path.is_file():
            data = path.read_bytes()
            found += [f"{path}: {s}" for s in SECRETS if s.encode() in data]
    return found


class FakeStore:
    """An http.server on 127.0.0.1 answering every request with one status and body; it
    records what it was asked (method, path) so a test can see no run was created."""

    def __init__(self, status: int, body: bytes, content_type: str):
        self.requests: list[tuple[str, str]] = []
        self.auth: list[str | None] = []  # each request's Authorization header
        fake = self

        class Handler(BaseHTTPRequestHandler):
            def answer(self) -> None:
                fake.requests.append((self.command, self.path))
                fake.auth.append(self.headers.get("Authorization"))
                length = int(self.headers.get("Content-Length") or 0)
                if length:
                    self.rfile.read(length)
                self.send_response(status)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_GET = do_POST = do_PATCH = do_DELETE = answer

            def log_message(self, *args) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.server.server_port}"
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


STORES = {
    "html": (200, b"<!doctype html><html><body>Welcome to nginx!</body></html>", "text/html"),
    "401": (401, b"You are not authenticated. Please see the docs.", "text/plain"),
    "403": (403, b"<html><body><h1>403 Forbidden</h1></body></html>", "text/html"),
    "404": (404, b"<html><title>404 Not Found</title></html>", "text/html"),
    "mlflow": (200, b'{"experiments": [{"experiment_id": "0", "name": "Default"}]}',
               "application/json"),
    "503": (503, b"<html>502 Bad Gateway</html>", "text/html"),
}


@pytest.fixture
def serve():
    """serve(kind) -> a running FakeStore answering like STORES[kind]."""
    started: list[FakeStore] = []

    def start(kind: str) -> FakeStore:
        started.append(FakeStore(*STORES[kind]))
        return started[-1]

    yield start
    for fake in started:
        fake.close()


def down_url() -> str:
    return f"http://127.0.0.1:{free_port()}"  # nothing listens there


UNRESOLVED = "http://no-such-host.invalid:5000"


# ----------------------------------------------------------------- classify: down or wrong


def test_classify_tells_down_from_wrong(serve):
    state = store.classify(with_secrets(down_url()), cache=False)
    assert state.startswith("down:") and "refused" in state, state
    state = store.classify(with_secrets(UNRESOLVED), cache=False)
    assert state.startswith("wrong:") and "does not resolve" in state, state
    for kind, needle in (("html", "HTML page"), ("404", "HTML page"), ("401", "HTTP 401"),
                         ("403", "HTTP 403")):
        state = store.classify(with_secrets(serve(kind).url), cache=False)
        assert state.startswith("wrong:") and needle in state, (kind, state)
    assert store.classify(serve("mlflow").url, cache=False) == "ok"
    state = store.classify(serve("503").url, cache=False)
    assert state.startswith("down:") and "503" in state  # a proxy before a stopped server
    # https:// to a plain-http server: the TLS handshake fails inside MLflow's request
    state = store.classify(serve("mlflow").url.replace("http:", "https:"), cache=False)
    assert state.startswith("wrong:") and "TLS with 127.0.0.1:" in state, state
    # A host that resolves and accepts the connection but never answers: down (timeout).
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen(4)
        state = store.classify(f"http://127.0.0.1:{silent.getsockname()[1]}", timeout=0.5,
                               cache=False)
    assert state.startswith("down:") and "did not answer" in state, state
    state = store.classify(f"postgresql://u:{PASSWORD}@no-such-host.invalid/db", cache=False)
    assert state.startswith("wrong:") and PASSWORD not in state, state


def test_the_probe_is_sent_with_mlflows_own_credentials(serve, tmp_path, monkeypatch):
    """The probe is MLflow's own request: it carries the credentials MLflow's writes carry,
    also those of ~/.mlflow/credentials, which a probe of its own would not know about."""
    import base64

    monkeypatch.setenv("HOME", str(tmp_path))
    for name in ("MLFLOW_TRACKING_USERNAME", "MLFLOW_TRACKING_PASSWORD", "MLFLOW_TRACKING_TOKEN"):
        monkeypatch.delenv(name, raising=False)
    (tmp_path / ".mlflow").mkdir()
    (tmp_path / ".mlflow" / "credentials").write_text(
        f"[mlflow]\nmlflow_tracking_username = bob\nmlflow_tracking_password = {PASSWORD}\n")
    fake = serve("mlflow")
    assert store.classify(fake.url, cache=False) == "ok"
    assert fake.auth == ["Basic " + base64.b64encode(f"bob:{PASSWORD}".encode()).decode()]
    monkeypatch.setenv("MLFLOW_TRACKING_TOKEN", TOKEN)  # a token is sent when no user is known
    (tmp_path / ".mlflow" / "credentials").unlink()
    assert store.classify(fake.url, cache=False) == "ok"
    assert fake.auth[-1] == f"Bearer {TOKEN}"


def test_classify_sqlite_needs_an_existing_directory(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    missing = tmp_path / "no" / "such" / "dir" / "m.db"
    state = store.classify(f"sqlite:///{missing}", cache=False)
    assert state.startswith("wrong:") and "does not exist" in state, state
    assert not (tmp_path / "no").exists()  # nothing made
    assert store.classify(f"sqlite:///{tmp_path / 'm.db'}", cache=False) == "ok"
    assert store.classify("sqlite:///outputs/mlflow.db", cache=False) == "ok"  # the default
    (tmp_path / "notes.db").write_text("not a database")
    assert "not an SQLite database" in store.classify(f"sqlite:///{tmp_path / 'notes.db'}",
                                                      cache=False)
    assert "is a directory" in store.classify(f"sqlite:///{tmp_path}", cache=False)


def test_a_down_store_passes_preflight_and_dry_runs_do_not_probe():
    preflight([quoted(with_secrets(down_url()))])  # down: the run starts and spools
    preflight([quoted(with_secrets(UNRESOLVED)), "run.dry_run=true"])  # a dry run: no probe
    with pytest.raises(UserError, match="is not a usable MLflow store"):
        preflight([quoted(with_secrets(UNRESOLVED))])


# ------------------------------------------------------------ wrong: refused at start


# Each kind of wrong store once through the entry point (a process start each); 403 is
# refused exactly as 401 (test_classify_tells_down_from_wrong has its verdict).
@pytest.mark.parametrize("kind,needle", [
    ("unresolved", "does not resolve"),
    ("html", "answers with an HTML page"),
    ("401", "refused access (HTTP 401)"),
])
def test_a_wrong_store_exits_2_at_start_and_writes_nothing(kind, needle, serve, tmp_path):
    fake = serve(kind) if kind in STORES else None
    uri = with_secrets(fake.url if fake else UNRESOLVED)
    proc = cli(quoted(uri), cwd=tmp_path)
    line = one_line_exit_2(proc, "rlexp: error: tracker.uri=http://alice:***@",
                           "is not a usable MLflow store", needle)
    assert_no_secret(proc.stdout + proc.stderr, "the console")
    assert list(tmp_path.iterdir()) == [], line  # no run dir, no store, nothing
    if fake is not None:  # only the probe: no experiment, no run created
        assert [m for m, _ in fake.requests] == ["GET"], fake.requests


def test_a_wrong_store_refuses_a_sweep_before_its_parent_run(serve, tmp_path):
    fake = serve("html")
    proc = cli("-m", "train.seed=0,1,2", quoted(with_secrets(fake.url)), cwd=tmp_path)
    one_line_exit_2(proc, "is not a usable MLflow store", "HTML page")
    assert_no_secret(proc.stdout + proc.stderr, "the console")
    assert list(tmp_path.iterdir()) == []  # no sweep dir, no multirun.yaml
    assert len(fake.requests) == 1  # one probe for the three jobs, no parent run


def test_a_wrong_store_in_the_environment_is_named_by_its_variable(serve, tmp_path):
    proc = cli(cwd=tmp_path, env={"MLFLOW_TRACKING_URI": with_secrets(serve("401").url)})
    one_line_exit_2(proc, "rlexp: error: MLFLOW_TRACKING_URI=http://alice:***@", "HTTP 401")
    assert_no_secret(proc.stdout + proc.stderr, "the console")
    assert list(tmp_path.iterdir()) == []


def test_a_sqlite_store_in_a_missing_directory_is_refused_and_not_made(tmp_path):
    db = tmp_path / "nonexistent" / "dir" / "m.db"
    proc = cli(f"tracker.uri=sqlite:///{db}", cwd=tmp_path)
    one_line_exit_2(proc, f"tracker.uri=sqlite:///{db} is not a usable MLflow store",
                    f"its directory {db.parent} does not exist")
    assert list(tmp_path.iterdir()) == []  # /nonexistent/dir was not created, nor outputs/


def test_an_unquoted_query_override_is_refused_with_a_hint_to_quote_it(tmp_path):
    uri = f"http://127.0.0.1:5077/?token={TOKEN}&sig={SIG}&X-Amz-Signature={AMZ}"
    proc = cli(f"tracker.uri={uri}", cwd=tmp_path)
    line = one_line_exit_2(proc, "cannot parse override", "quote the value: ")
    assert line.endswith("""'tracker.uri="http://127.0.0.1:5077/?token=***&sig=***"""
                         """&X-Amz-Signature=***"'"""), line
    assert_no_secret(proc.stdout + proc.stderr, "the console")
    assert list(tmp_path.iterdir()) == []


# ------------------------------------------------------------------- down: spools, quiet


def _spooled_run(run_dir: Path, uri: str) -> None:
    """A run whose store is down all along: everything waits in its spool."""
    listener = MlflowListener(uri, "offline", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir, "offline-run"))
    for step in (1, 2, 3):
        listener.on_metrics(step, metrics(step))
    listener.on_run_end("FINISHED", {"steps_done": 3})


def test_a_down_store_warns_once_without_secrets_or_retry_chatter(tmp_path, capsys, caplog):
    quiet_third_party()
    uri = with_secrets(down_url())
    run_dir = tmp_path / "run"
    with caplog.at_level(logging.DEBUG):
        _spooled_run(run_dir, uri)
    err = capsys.readouterr().err
    assert err.count("unreachable (") == 1, err  # one warning for the outage
    assert "http://alice:***@127.0.0.1:" in err and "token=***" in err, err
    assert_no_secret(err, "the warnings")
    assert not [r for r in caplog.records if "Retrying" in r.getMessage()]
    assert (run_dir / SPOOL_FILE).exists()
    assert files_holding_secrets(tmp_path) == []  # spool, tracking.json, summary


def test_urllib3_retry_lines_are_dropped():
    quiet_third_party()
    logger = logging.getLogger("urllib3.connectionpool")
    retry = logger.makeRecord(logger.name, logging.WARNING, __file__, 1,
                              "Retrying (%r) after connection broken by '%r': %s",
                              ("Retry(total=0)", "NewConnectionError", "/api/2.0/x"), None)
    other = logger.makeRecord(logger.name, logging.WARNING, __file__, 1,
                              "Connection pool is full, discarding connection: %s", ("h",), None)
    assert not logger.filter(retry) and logger.filter(other)


def test_first_line_masks_before_it_cuts(monkeypatch):
    """A message cut at 200 characters inside a password used to leave it in clear."""
    monkeypatch.setattr("sys.argv", ["rlexp"])  # the secret is known only from the text
    exc = RuntimeError("x" * 170 + f" http://alice:{PASSWORD}@store.example:5000/api/2.0/"
                       f"mlflow/runs/log-batch {QUERY}")
    line = store.first_line(exc)
    assert len(line) <= 200 and PASSWORD[:4] not in line, line
    assert_no_secret(line, "first_line")


def test_a_remembered_uri_masks_its_secrets_anywhere():
    remember(with_secrets("http://store.example:5000"))
    text = redact_text(f"pw {PASSWORD}, tok {TOKEN}; in a path: /x?sig={SIG}; raw {AMZ}.")
    assert_no_secret(text, "redacted text")


def test_library_lines_logs_warnings_and_prints_are_masked(tmp_path):
    """Once a process knows a URI's secrets, every line masks them: a library's log record
    (and its traceback), a Python warning, a plain print to stdout or stderr."""
    script = textwrap.dedent(f"""
        import logging, sys, warnings
        from rlexp.base.redact import remember
        logging.basicConfig(level=logging.INFO, stream=sys.stderr)
        remember({with_secrets('http://store.example:5000')!r})
        logging.getLogger("urllib3.connectionpool").warning("to /?token=%s", {TOKEN!r})
        try:
            raise ConnectionError("refused by store.example for {PASSWORD}")
        except ConnectionError:
            logging.getLogger("mlflow").exception("request failed")
        warnings.warn("signed with {SIG}")
        print("amz {AMZ}")
        print("pw {PASSWORD}", file=sys.stderr)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=tmp_path, env=cli_env(),
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    out = proc.stdout + proc.stderr
    assert "ConnectionError" in out and "signed with ***" in out and "amz ***" in out, out
    assert_no_secret(out, "the console")


# ----------------------------------------------------------------- rlexp.sync: which one


def _sync(run_dir: Path, uri: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlexp.sync", str(run_dir), "--uri", uri],
                          env=cli_env(), capture_output=True, text=True, timeout=120)


@pytest.mark.slow
def test_sync_says_whether_the_store_is_down_or_wrong(serve, tmp_path, capsys):
    run_dir = tmp_path / "run"
    _spooled_run(run_dir, with_secrets(down_url()))
    capsys.readouterr()
    spool = (run_dir / SPOOL_FILE).read_bytes()
    link = json.loads((run_dir / LINK_FILE).read_text())
    assert link["uri"].startswith("http://alice:***@") and link["run_id"] is None
    # down, and wrong before and after a connection (a process start each; the other wrong
    # kinds are classify's, test_classify_tells_down_from_wrong)
    cases = [(with_secrets(down_url()), "the store is down: ", "run this command again"),
             (with_secrets(UNRESOLVED), "the store is wrong: ", "does not resolve"),
             (with_secrets(serve("401").url), "the store is wrong: ", "HTTP 401")]
    for uri, *needles in cases:
        proc = _sync(run_dir, uri)
        one_line_exit_2(proc, "rlexp: error: could not reach the MLflow store http://alice:***@",
                        *needles)
        assert_no_secret(proc.stdout + proc.stderr, "rlexp.sync's console")
        assert (run_dir / SPOOL_FILE).read_bytes() == spool  # every record kept
    assert files_holding_secrets(tmp_path) == []


# ---------------------------------------------------------- a real run against a down store


@pytest.mark.slow
def test_a_real_run_with_a_down_store_spools_quietly_and_leaks_nothing(tmp_path):
    """`python -m rlexp` with every kind of URI secret and nothing listening: the run trains,
    exits 0 and spools; one warning says so; no urllib3 retry lines; no secret on the
    console, in the run dir (rlexp.log, .hydra, spool, summary) or anywhere under the cwd."""
    uri = with_secrets(down_url())
    # logprob_gap_every=1: log-probs at both steps, one sampler program to compile
    proc = cli(*TINY, "rollout.logprob_gap_every=1", quoted(uri), cwd=tmp_path, timeout=600)
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-3000:]
    assert console.count("unreachable (") == 1 and "python -m rlexp.sync" in console, console
    assert "Retrying" not in console and "Traceback" not in console, console[-3000:]
    assert_no_secret(console, "the console")
    (run_dir,) = (tmp_path / "outputs" / "runs").iterdir()
    assert (run_dir / SPOOL_FILE).exists() and (run_dir / "rlexp.log").exists()
    assert "Retrying" not in (run_dir / "rlexp.log").read_text()
    assert files_holding_secrets(tmp_path) == []
    assert not (tmp_path / "outputs" / "mlflow.db").exists()  # the named store, not the default


# ------------------------------------------- names the store or its filesystem cannot take

LONG_EXPERIMENT = "team/" + "x" * 495  # 500 characters: MLflow's limit, 500 bytes on disk


@pytest.mark.parametrize("override, needle", [
    (f"tracker.experiment={LONG_EXPERIMENT}x", "at most 500 characters"),
    (f"tracker.run_name={'r' * 251}", "at most 250 characters")],
    ids=["experiment", "run_name"])
def test_a_name_mlflow_cannot_take_is_refused_at_start(tmp_path, override, needle):
    proc = cli(override, "train.steps=1", cwd=tmp_path)
    line = one_line_exit_2(proc, override.split("=")[0] + "=", needle)
    assert len(line) < 300, line  # the name is shown cut short
    assert list(tmp_path.iterdir()) == []


def _finished_run(uri: str, experiment: str, run_dir: Path) -> MlflowListener:
    listener = MlflowListener(uri, experiment, run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir, "long-names"))
    for step in (1, 2):
        listener.on_metrics(step, metrics(step))
    (run_dir / "note.txt").write_text("an artifact\n")
    listener.on_artifact(run_dir / "note.txt")
    listener.on_run_end("FINISHED", {"steps_done": 2})
    return listener


def test_a_500_character_experiment_keeps_its_artifacts_in_a_dir_the_disk_takes(tmp_path, capsys):
    """MLflow takes the name; its artifact dir (the name as a file name) is cut to the
    filesystem's NAME_MAX with a digest, so the run ends FINISHED with its artifacts."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    store.prepare_store(uri)
    listener = _finished_run(uri, LONG_EXPERIMENT, tmp_path / "run")
    client = MlflowClient(uri)
    run = client.get_run(listener.run.link.run_id)
    assert run.info.status == "FINISHED"
    assert "note.txt" in [f.path for f in client.list_artifacts(run.info.run_id)]
    exp_dir = Path(client.get_experiment(run.info.experiment_id).artifact_location)
    assert len(exp_dir.name.encode()) <= store.name_max(tmp_path) and exp_dir.is_dir()
    assert not (tmp_path / "run" / SPOOL_FILE).exists() or \
        (tmp_path / "run" / SPOOL_FILE).read_text().strip() == ""
    assert "warning" not in capsys.readouterr().err


def _broken_experiment(tmp_path: Path) -> tuple[str, str]:
    """A store whose experiment (made by an older rlexp) has an artifact dir whose name is
    over NAME_MAX: every artifact fails with [Errno 36] File name too long."""
    from mlflow import MlflowClient

    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    store.prepare_store(uri)
    MlflowClient(uri).create_experiment(
        "old", artifact_location=str(tmp_path / "mlartifacts" / ("x" * 300)))
    return uri, "old"


def test_a_lasting_store_failure_is_named_and_never_leaves_the_run_running(tmp_path, capsys):
    from mlflow import MlflowClient

    uri, experiment = _broken_experiment(tmp_path)
    listener = _finished_run(uri, experiment, tmp_path / "run")
    run = MlflowClient(uri).get_run(listener.run.link.run_id)
    assert run.info.status == "FINISHED"  # the status went through; the files could not
    assert run.data.metrics["train/loss"] == metrics(2)["train/loss"]
    err = capsys.readouterr().err
    assert "File name too long" in err and "unreachable" not in err, err
    assert [ln for ln in err.splitlines() if ln.strip()] and \
        all(ln.startswith("rlexp: warning: ") for ln in err.splitlines() if ln.strip()), err
    assert len([ln for ln in err.splitlines() if ln.strip()]) <= 2, err


def test_sync_names_a_lasting_failure_and_ends_the_run(tmp_path):
    """A run that died while its store failed its files (spool left, MLflow run RUNNING):
    rlexp.sync sends what the store takes, names what it cannot and why, and the run is
    no longer RUNNING."""
    from mlflow import MlflowClient

    uri, experiment = _broken_experiment(tmp_path)
    run_dir = tmp_path / "run"
    listener = MlflowListener(uri, experiment, run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(info(run_dir, "dies"))
    listener.on_metrics(1, metrics(1))
    crash(listener)
    # A file the dead process spooled and never sent (its writer is gone): the one record the
    # store refuses. Without it the test raced the listener's environment thread, whose
    # environment.json is the only other file and may be spooled before or after the crash.
    notes = tmp_path / "notes.txt"
    notes.write_text("kept\n")
    listener.on_artifact(notes)
    run_id = json.loads((run_dir / LINK_FILE).read_text())["run_id"]
    assert MlflowClient(uri).get_run(run_id).info.status == "RUNNING"
    proc = subprocess.run([sys.executable, "-m", "rlexp.sync", str(run_dir)], env=cli_env(),
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "File name too long" in proc.stdout + proc.stderr, proc.stdout + proc.stderr
    assert "Traceback" not in proc.stderr
    assert MlflowClient(uri).get_run(run_id).info.status == "KILLED"


def _wrapped(exc: BaseException) -> BaseException:
    try:
        try:
            raise exc
        except BaseException as inner:
            raise RuntimeError("artifact upload failed") from inner
    except RuntimeError as outer:
        return outer


@pytest.mark.parametrize("exc, outage", [
    (OSError(36, "File name too long"), False),
    (PermissionError(13, "Permission denied"), False),
    (_wrapped(OSError(36, "File name too long")), False),
    (ConnectionRefusedError(111, "Connection refused"), True),
    (TimeoutError("timed out"), True),
    (socket.gaierror(-3, "Temporary failure in name resolution"), True),
    (OSError(28, "No space left on device"), True),  # space may come back: retried
    (RuntimeError("HTTPConnectionPool: Max retries exceeded"), True)],
    ids=["name_too_long", "permission", "wrapped", "refused", "timeout", "dns", "disk_full",
         "other"])
def test_is_outage_tells_a_store_that_may_come_back_from_a_lasting_failure(exc, outage):
    assert store.is_outage(exc) is outage


def test_is_outage_counts_mlflows_refusals_as_lasting():
    from mlflow.exceptions import MlflowException
    from mlflow.protos.databricks_pb2 import BAD_REQUEST, TEMPORARILY_UNAVAILABLE

    assert not store.is_outage(MlflowException("bad", error_code=BAD_REQUEST))
    assert store.is_outage(MlflowException("busy", error_code=TEMPORARILY_UNAVAILABLE))
