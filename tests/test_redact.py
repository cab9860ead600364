"""Secrets never reach MLflow or the run dir: names, free text, Hydra's saved files, a store."""

from __future__ import annotations

import base64
import http.server
import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pytest

from rlexp.base.events import RunInfo
from rlexp.base.lock import LOCK_FILE, try_flock
from rlexp.base.redact import MASK, is_secret_key, redact_params, redact_text, scrub_run_dir
from rlexp.tracking import prepare_store
from rlexp.tracking.listener import MlflowListener
from helpers import cli, cli_env, said
from sweep_helpers import TINY

TOKEN = "hf_PlantedTokenValue123456"
API_KEY = "sk-planted-api-key-987654"


@pytest.mark.parametrize("key", ["HF_TOKEN", "tracker.api_key", "db.password", "mySecret",
                                 "apiKey", "AWS_SECRET_ACCESS_KEY", "hydra.launcher.token",
                                 "MLFLOW_TRACKING_PASSWORD", "passkey", "authorization", "bearer",
                                 "cookie", "api_key", "hf_token", "password", "secret",
                                 "credentials", "X-Amz-Signature", "sig", "key",
                                 "hydra.job.env_set.HF_TOKEN", "client_secret", "db_pwd"])
def test_secret_names(key):
    assert is_secret_key(key)


@pytest.mark.parametrize("key", ["model.tokenizer", "throughput/tokens_per_s", "max_tokens",
                                 "train.batch_size", "keyboard", "algo.kl_estimator",
                                 "token_budget", "train/token_count", "eval/token_accuracy",
                                 "secret_sauce_weight", "dataset.key", "X-Amz-Date", "PWD"])
def test_names_that_only_look_secret(key):
    assert not is_secret_key(key)


def test_the_working_directory_is_not_a_secret(monkeypatch, tmp_path):
    # $PWD once counted as a password variable and every path under the cwd read '***'.
    monkeypatch.setenv("PWD", str(tmp_path))
    monkeypatch.setenv("DB_PWD", "hunter2-db")
    line = f"dataset.path={tmp_path}/data.jsonl db=hunter2-db"
    assert redact_text(line) == f"dataset.path={tmp_path}/data.jsonl db=***"


def test_redact_text_and_params(monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    line = f"python -m rlexp tracker.api_key={API_KEY} algo.beta=0.1 --header {TOKEN}"
    out = redact_text(line)
    assert TOKEN not in out and API_KEY not in out
    assert "algo.beta=0.1" in out and f"tracker.api_key={MASK}" in out
    params = redact_params({"tracker.api_key": API_KEY, "model.path": f"/m?t={TOKEN}",
                            "model.tokenizer": "char", "algo.beta": 0.04})
    assert params == {"tracker.api_key": MASK, "model.path": f"/m?t={MASK}",
                      "model.tokenizer": "char", "algo.beta": 0.04}


def test_secrets_inside_a_list_param_and_a_tag_named_like_one_are_masked(monkeypatch):
    """flatten stops at lists: reward.functions is one param, a list of dicts whose free-form
    kwargs can hold a key or a URI's password; a tag is masked by its name as a param is."""
    from rlexp.config.naming import flatten
    from rlexp.tracking.listener import clean_params, clean_tags

    functions = [{"name": "judge", "kwargs": {"api_key": API_KEY, "temperature": 0.5,
                                              "url": "https://u:PlantedPw99@judge.example/v1"}}]
    flat = flatten({"reward": {"functions": functions}, "algo": {"beta": 0.04}})
    assert isinstance(flat["reward.functions"], list)  # what reaches the params
    param = clean_params(flat)["reward.functions"]
    assert API_KEY not in param and "PlantedPw99" not in param
    assert "'temperature': 0.5" in param and "judge.example" in param, param
    tags = clean_tags({"api_key": "sk-short", "team": "rl", "note": f"token={API_KEY}"})
    assert tags == {"api_key": MASK, "team": "rl", "note": f"token={MASK}"}


def _hydra_dir(run_dir: Path) -> None:
    """What Hydra saves for `python -m rlexp +tracker.api_key=... algo.beta=0.1`."""
    hydra = run_dir / ".hydra"
    hydra.mkdir(parents=True)
    (hydra / "overrides.yaml").write_text(f"- +tracker.api_key={API_KEY}\n- algo.beta=0.1\n")
    (hydra / "config.yaml").write_text(
        f"algo:\n  beta: 0.1\ntracker:\n  name: mlflow\n  api_key: {API_KEY}\n"
        f"model:\n  tokenizer: char\n")
    (hydra / "hydra.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n"
        f"    - +tracker.api_key={API_KEY}\n    - algo.beta=0.1\n"
        f"  job:\n    override_dirname: +tracker.api_key={API_KEY},algo.beta=0.1\n"
        f"    env_set:\n      HF_TOKEN: {TOKEN}\n")


def _files_containing(root: Path, secret: str) -> list[Path]:
    return [p for p in root.rglob("*") if p.is_file() and secret.encode() in p.read_bytes()]


def test_scrub_run_dir_rewrites_hydra_files(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    _hydra_dir(tmp_path)
    scrub_run_dir(tmp_path)
    assert _files_containing(tmp_path, API_KEY) == []
    assert _files_containing(tmp_path, TOKEN) == []
    config = (tmp_path / ".hydra" / "config.yaml").read_text()
    assert "beta: 0.1" in config and "tokenizer: char" in config and f"api_key: {MASK}" in config
    scrub_run_dir(tmp_path / "no-hydra-here")  # nothing to do, no error


def test_planted_secrets_are_nowhere_in_store_or_run_dir(tmp_path, monkeypatch):
    """A token in $HF_TOKEN and a tracker.api_key-style param: after a tracked run, neither
    the sqlite store, its artifacts nor the run dir holds them."""
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    monkeypatch.setattr("sys.argv", ["rlexp", f"+tracker.api_key={API_KEY}", "algo.beta=0.1"])
    store_dir = tmp_path / "outputs"
    uri = f"sqlite:///{store_dir / 'mlflow.db'}"
    prepare_store(uri)
    run_dir = tmp_path / "run"
    _hydra_dir(run_dir)
    scrub_run_dir(run_dir)  # what the orchestrator does at run start
    listener = MlflowListener(uri, "secrets", run_dir, gated=False, flush_every_s=3600.0)
    listener.on_run_start(RunInfo(
        name="secret-run", run_dir=run_dir,
        params={"tracker.api_key": API_KEY, "model.path": f"/models/x?token={TOKEN}",
                "algo.beta": 0.1},
        tags={"overrides": f"+tracker.api_key={API_KEY} algo.beta=0.1",
              "command": f"HF_TOKEN={TOKEN} python -m rlexp"}))
    listener.on_metrics(1, {"train/reward_mean": 0.5})
    listener.on_eval(1, {"eval/accuracy": 0.5}, [{"prompt": f"uses {TOKEN}", "completion": "x"}])
    listener.on_run_end("FINISHED", {"overrides": [f"+tracker.api_key={API_KEY}"],
                                     "env": {"HF_TOKEN": TOKEN}})
    for secret in (TOKEN, API_KEY):
        assert _files_containing(store_dir, secret) == [], secret  # db + mlartifacts
        assert _files_containing(run_dir, secret) == [], secret
    from mlflow import MlflowClient

    run = MlflowClient(uri).search_runs([MlflowClient(uri).get_experiment_by_name(
        "secrets").experiment_id])[0]
    assert run.data.params["tracker.api_key"] == MASK
    assert API_KEY not in run.data.tags["overrides"]


@pytest.mark.parametrize("text,secret,kept", [
    ("tracker.uri=http://user:PlantedPw99@host:5000/", "PlantedPw99", "http://user:***@host:5000/"),
    ("postgresql+psycopg2://mlf:PlantedPw99@db:5432/m", "PlantedPw99", "postgresql+psycopg2://mlf:***@db"),
    ("https://ghp_PlantedTok99@github.com/o/r", "ghp_PlantedTok99", "https://***@github.com/o/r"),
    ("sqlite:///tmp/m.db?token=PlantedTok99&mode=ro", "PlantedTok99", "?token=***&mode=ro"),
    ("gs://b/o?X-Goog-Signature=PlantedSig99&X-Goog-Date=20260101", "PlantedSig99",
     "X-Goog-Signature=***&X-Goog-Date=20260101"),
    ("https://acct.blob.core.windows.net/c?sv=2020&sig=PlantedSig99", "PlantedSig99", "sv=2020&sig=***"),
    ("Authorization: Bearer PlantedTok99", "PlantedTok99", "Authorization: "),
    ("+hydra.job.env_set.HF_TOKEN=PlantedTok99 algo.beta=0", "PlantedTok99", "algo.beta=0"),
])
def test_uri_credentials_and_query_secrets_are_masked(text, secret, kept, monkeypatch):
    monkeypatch.setattr("sys.argv", ["rlexp"])
    out = redact_text(text)
    assert secret not in out and kept in out, out


def test_ordinary_text_is_left_alone(monkeypatch):
    monkeypatch.setattr("sys.argv", ["rlexp"])
    text = ("Basic arithmetic: 3 + 4 = 7. sqlite:///outputs/mlflow.db http://127.0.0.1:5000/ "
            "eval/token_accuracy=0.5 token_budget=128")
    assert redact_text(text) == text


def test_credentials_of_a_uri_are_masked_where_they_reappear(monkeypatch):
    monkeypatch.setattr("sys.argv", ["rlexp", "tracker.uri=http://u:PlantedPw99@h/"])
    assert redact_text("retrying with PlantedPw99") == f"retrying with {MASK}"


def test_multirun_yaml_is_scrubbed(tmp_path, monkeypatch):
    from rlexp.base.redact import scrub_sweep_dir

    monkeypatch.setattr("sys.argv", ["rlexp"])
    (tmp_path / "multirun.yaml").write_text(
        "hydra:\n  overrides:\n    task:\n    - +hydra.job.env_set.HF_TOKEN=PlantedTok99\n"
        "  job:\n    env_set:\n      HF_TOKEN: PlantedTok99\n"
        "tracker:\n  uri: http://u:PlantedPw99@h:5000\neval:\n  token_budget: 3\n")
    scrub_sweep_dir(tmp_path)
    text = (tmp_path / "multirun.yaml").read_text()
    assert "PlantedTok99" not in text and "PlantedPw99" not in text
    assert "token_budget: 3" in text and "uri: http://u:***@h:5000" in text


# ----------------------------------------------------------- acceptance: a real sweep

URI_PASSWORD = "UriPassword42x"
QUERY_SIG = "QuerySig42x"
ENV_SET_TOKEN = "EnvSetToken42x"
ENV_VAR_KEY = "EnvVarValue42x"


@pytest.mark.slow
def test_no_credential_reaches_disk_store_or_console_in_a_real_sweep(tmp_path):
    """Credentials through a URI (a real `mlflow server` behind http://alice:PW@...), a query
    string, a hydra.job.env_set override and an environment variable; a 2-job sweep on the
    emulated 4-device v5p-8 profile (platform setup for multiruns). None of the values may be
    anywhere under the output dirs, in the store (db, artifacts, params, tags) or on the
    console; the URI still works; ordinary metric names are not masked; no noise lines."""
    from mlflow import MlflowClient
    from test_tracking_server import Server

    from rlexp.tracking.ui import free_port

    server = Server(tmp_path / "store" / "mlflow.db", free_port()).start()
    try:
        uri = server.url.replace("http://", f"http://alice:{URI_PASSWORD}@")
        proc = cli(
            "-m", "train.seed=0,1", "hardware=v5p-8", "hardware.emulate=true", "train.steps=1",
            "train.batch_size=4", "eval.pass_k=1", "eval.num_samples=4", "dataset.num_eval=4",
            "model.warm_start_steps=0", f"tracker.uri={uri}",
            f"+hydra.job.env_set.HF_TOKEN={ENV_SET_TOKEN}",
            f"+hydra.job.env_set.DATA_URL='https://data.invalid/d.jsonl?sig={QUERY_SIG}&v=1'",
            cwd=tmp_path, timeout=900, env={"WANDB_API_KEY": ENV_VAR_KEY})
        console = proc.stdout + proc.stderr
        assert proc.returncode == 0, console[-3000:]
        client = MlflowClient(server.url)  # the same store, reached without credentials
        exp = client.get_experiment_by_name("rlexp")
        runs = client.search_runs([exp.experiment_id])
    finally:
        server.stop()
    secrets = (URI_PASSWORD, QUERY_SIG, ENV_SET_TOKEN, ENV_VAR_KEY)
    for secret in secrets:
        assert secret not in console, secret
        assert _files_containing(tmp_path, secret) == [], secret  # run/sweep dirs, db, artifacts
    children = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    assert len(children) == 2 and len(runs) == 3  # the credentialed URI worked, nested
    for run in runs:
        text = json.dumps([run.data.params, run.data.tags])
        assert not any(secret in text for secret in secrets), text
    params = children[0].data.params
    assert params["tracker.uri"] == server.url.replace("http://", f"http://alice:{MASK}@")
    assert params["train.steps"] == "1" and params["hardware.name"] == "v5p-8"
    masked = [k for k, v in params.items() if MASK in v]
    assert masked == ["tracker.uri"], masked  # nothing else masked (no false positives)
    metrics = children[0].data.metrics
    assert {"eval/accuracy", "train/reward_mean"} <= set(metrics)
    assert all(isinstance(v, float) for v in metrics.values())
    summary = json.loads(next(tmp_path.glob("outputs/sweeps/*/*/summary.json")).read_text())
    assert summary["status"] == "FINISHED" and MASK not in json.dumps(summary["train_final"])
    for noise in ("Resharding model from", "Skipping non-TPU device", "Creating initial MLflow",
                  "View run", "Traceback", "on-policy", "INFO mlflow"):
        assert noise not in console, noise
    # Piped (not a terminal): one line per event, no progress-bar redraws.
    assert "\r" not in console and console.count("step 1/1: reward") == 2, console[-3000:]


def test_cfg_job_prints_the_config_without_credentials(tmp_path):
    """`python -m rlexp --cfg job` prints the composed config; the tracking URI's password and
    a secret-named key's value are masked there too, the rest is printed as composed."""
    proc = cli("--cfg", "job", "tracker.uri=http://alice:s3cretpw@mlflow.example:5000",
               "+tracker.tags.api_key=abc123xyz", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "s3cretpw" not in proc.stdout and "abc123xyz" not in proc.stdout
    assert f"uri: http://alice:{MASK}@mlflow.example:5000" in proc.stdout
    assert f"api_key: '{MASK}'" in proc.stdout or f"api_key: {MASK}" in proc.stdout
    assert "num_layers: 2" in proc.stdout


# ------------------------------------- secrets kept out of what Hydra writes (mask_argv)

PLANTED_PW = "PlantedPw55q"
PLANTED_TOK = "hf_PlantedTok55q"


def test_mask_argv_puts_placeholders_and_unmask_gives_the_values_back(monkeypatch):
    from rlexp.base.redact import SECRETS_ENV, mask_argv, masked_secrets, unmask

    # set first so that monkeypatch removes what mask_argv puts there (a later test in this
    # process, test_xpk's, would otherwise launch with these secrets in its environment)
    monkeypatch.setenv(SECRETS_ENV, "")
    monkeypatch.delenv(SECRETS_ENV)
    argv = ["-m", f'tracker.uri="http://u:{PLANTED_PW}@h:5000/"', "train.steps=2",
            f"+hydra.job.env_set.HF_TOKEN={PLANTED_TOK}", "+tracker.tags.api_key='a,b'",
            f"dataset.path=https://d.invalid/x?sig={PLANTED_PW}&v=1"]
    masked = mask_argv(argv)
    assert not any(PLANTED_PW in a or PLANTED_TOK in a for a in masked), masked
    assert masked[:4] == ["-m", 'tracker.uri="http://u:***1***@h:5000/"', "train.steps=2",
                          "+hydra.job.env_set.HF_TOKEN=***2***"]
    assert masked[4] == "+tracker.tags.api_key='***3***'"  # quoted: one value, quotes kept
    assert masked[5] == "dataset.path=https://d.invalid/x?sig=***1***&v=1"  # same value
    assert [unmask(a) for a in masked] == argv
    assert mask_argv(argv) == masked  # the same command, the same placeholders (run dirs)
    assert set(masked_secrets().values()) == {PLANTED_PW, PLANTED_TOK, "a,b"}
    assert PLANTED_PW not in os.environ[SECRETS_ENV]  # encoded: one word, masked when shown
    assert redact_text(f"--env {SECRETS_ENV}={os.environ[SECRETS_ENV]}") == \
        f"--env {SECRETS_ENV}={MASK}"


class _Store(http.server.BaseHTTPRequestHandler):
    """A tracking server that is down (503 to everything): what reaches it is recorded as
    (path, the user:password of its Basic auth)."""
    seen: list[tuple[str, str]] = []

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        auth = self.headers.get("Authorization", "")
        creds = base64.b64decode(auth.split()[-1]).decode() if auth.startswith("Basic") else ""
        type(self).seen.append((self.path, creds))
        self.send_response(503)
        self.send_header("Content-Length", "0")
        self.end_headers()

    do_POST = do_GET

    def log_message(self, *args) -> None:
        pass


def _down_store():
    _Store.seen = []
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Store)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def _run_until_the_job_calls(args: list[str], cwd: Path, calls: int,
                             timeout: float = 300) -> str:
    """Start `python -m rlexp ARGS`; once the store was asked for the experiment `calls`
    times (pre-flight's probe asks nothing; a sweep's parent run asks first, then the job),
    stop it (SIGTERM to its process group, the way a scheduler does). Returns the console."""
    proc = subprocess.Popen([sys.executable, "-m", "rlexp", *args], cwd=cwd,
                            env=cli_env({"MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0"}),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and proc.poll() is None and \
            sum("get-by-name" in path for path, _ in _Store.seen) < calls:
        time.sleep(0.2)
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    # Wait for the launching process to exit and the job to let go of its run dir. joblib's
    # worker (loky) outlives the launcher, idle for up to 300 s with the console pipe open:
    # waiting for the pipe to close cost a full minute per test.
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and not (proc.poll() is not None and _job_ended(cwd)):
        time.sleep(0.2)
    try:
        os.killpg(proc.pid, signal.SIGKILL)  # what is left: an idle worker (or a hung launch)
    except ProcessLookupError:
        pass
    out, _ = proc.communicate()
    return out


def _job_ended(cwd: Path) -> bool:
    """The job wrote summary.json and released its run dir's flock (rlexp.lock), which it
    holds until its last write."""
    summaries = list(cwd.glob("outputs/**/summary.json"))
    for summary in summaries:
        handle = try_flock(summary.parent / LOCK_FILE)
        if handle is None:
            return False
        handle.close()
    return bool(summaries)


def _secrets_under(root: Path) -> list[Path]:
    return [p for secret in (PLANTED_PW, PLANTED_TOK) for p in _files_containing(root, secret)]


# A SIGTERM stops a run at its next step boundary, so the job still evaluates and takes its
# first step (and writes its end-of-run files, which are checked too) after it reached the
# store: the smallest evaluation and batch keep that short (not the recipe's 128 prompts x
# pass@4 evaluation and 32-prompt step). sweep_helpers.TINY, the launcher tests' job: its
# programs are compiled once for the session (the run cache), not once more here.
SMALL_RUN = TINY


@pytest.mark.slow  # 30-100 s: the job reaches the store once its engine is built
@pytest.mark.parametrize("launcher", ["basic", "joblib"])
def test_a_local_job_gets_the_real_credentials_and_no_file_holds_them(tmp_path, launcher):
    """A run (basic) and a one-job sweep (joblib's worker process) with a password in
    tracker.uri and a token in hydra.job.env_set, stopped once the job reached the store:
    the job's requests carry the real password (not a placeholder), and no file under
    outputs/ (.hydra/*.yaml, multirun.yaml, tracking.json, the spool, rlexp.log) holds
    either secret."""
    server = _down_store()
    try:
        uri = f"http://alice:{PLANTED_PW}@127.0.0.1:{server.server_address[1]}/"
        sweep = ["-m", f"hydra/launcher={launcher}"] if launcher == "joblib" else []
        console = _run_until_the_job_calls(
            [*sweep, f"tracker.uri={uri}", f"+hydra.job.env_set.HF_TOKEN={PLANTED_TOK}",
             *SMALL_RUN], tmp_path,
            calls=2 if launcher == "joblib" else 1)
    finally:
        server.shutdown()
    job_calls = [creds for path, creds in _Store.seen if "get-by-name" in path]
    assert len(job_calls) >= (2 if launcher == "joblib" else 1), console[-3000:]
    assert {creds for _, creds in _Store.seen} == {f"alice:{PLANTED_PW}"}, _Store.seen
    hydra_files = list(tmp_path.glob("outputs/**/.hydra/overrides.yaml"))
    assert hydra_files, sorted(str(p) for p in tmp_path.rglob("*"))[:50]
    assert _secrets_under(tmp_path) == []
    assert PLANTED_PW not in console and PLANTED_TOK not in console
    assert "Traceback" not in console, console[-3000:]


XPK = ["-m", "hydra/launcher=xpk", "hydra.launcher.dry_run=true", "train.steps=2",
       f'tracker.uri="http://user:{PLANTED_PW}@127.0.0.1:9/"', "run.output_uri=gs://b/r",
       f"+hydra.job.env_set.HF_TOKEN={PLANTED_TOK}"]


@pytest.mark.parametrize("hardware, code", [("cpu", 2), ("v6e-8", 0)])
def test_an_xpk_dry_run_leaves_no_secret_and_no_dir(tmp_path, hardware, code):
    """Refused (a CPU profile) or planned: the sweep dir Hydra made (multirun.yaml) is gone,
    and neither the console nor any file holds the secrets; the pod would get the real
    store (its env, printed masked) and the token (its env's RLEXP_MASKED_SECRET)."""
    proc = cli(*XPK, f"hardware={hardware}", "hydra.sweep.dir=sweep", cwd=tmp_path)
    console = proc.stdout + proc.stderr
    assert proc.returncode == code, console[-3000:]
    assert not (tmp_path / "sweep").exists()
    assert _secrets_under(tmp_path) == []
    assert PLANTED_PW not in console and PLANTED_TOK not in console
    assert "Traceback" not in console
    if code == 2:
        assert len(said(proc.stderr)) == 1, proc.stderr
        assert "hardware=cpu is a cpu profile" in proc.stderr
    else:
        assert "--env MLFLOW_TRACKING_URI=http://user:***@127.0.0.1:9/" in proc.stdout
        assert "--env RLEXP_MASKED_SECRET=***" in proc.stdout


def test_a_ray_dry_run_leaves_no_secret_and_no_dir(tmp_path):
    """hydra/launcher=rlexp_ray's dry run (the placement printed, nothing started) with a
    password in tracker.uri and a token in hydra.job.env_set: exit 0, the sweep dir Hydra
    made is gone, and neither the console nor any file holds the secrets."""
    proc = cli("-m", "hydra/launcher=rlexp_ray", "hydra.launcher.dry_run=true", "hardware=v4-64",
               "train.steps=1", f'tracker.uri="http://user:{PLANTED_PW}@127.0.0.1:9/"',
               f"+hydra.job.env_set.HF_TOKEN={PLANTED_TOK}", "hydra.sweep.dir=sweep",
               cwd=tmp_path, env={"RAY_ADDRESS": "127.0.0.1:9"}, timeout=300)
    console = proc.stdout + proc.stderr
    assert proc.returncode == 0, console[-3000:]
    assert "(dry run)" in proc.stdout and not (tmp_path / "sweep").exists()
    assert _secrets_under(tmp_path) == []
    assert PLANTED_PW not in console and PLANTED_TOK not in console
    assert "Traceback" not in console and len(said(proc.stderr)) <= 3, proc.stderr


def test_unmask_config_puts_the_secrets_back_and_leaves_interpolations(monkeypatch):
    """A job's composed config gets the real values back where the placeholders are, in nested
    dicts and lists, under a struct/readonly config, and an interpolation stays unresolved."""
    from omegaconf import OmegaConf

    from rlexp.base import redact

    monkeypatch.setenv(redact.SECRETS_ENV, "")  # undone at the end: see above
    monkeypatch.delenv(redact.SECRETS_ENV)
    argv = redact.mask_argv(["tracker.uri=http://u:Pw0rd123@h:5000/"])
    masked = argv[0].split("=", 1)[1]
    assert "Pw0rd123" not in masked
    cfg = OmegaConf.create({"tracker": {"uri": masked, "copy": "${tracker.uri}"},
                            "hosts": [masked, "plain"]})
    OmegaConf.set_struct(cfg, True)
    OmegaConf.set_readonly(cfg, True)
    redact.unmask_config(cfg)
    assert cfg.tracker.uri == "http://u:Pw0rd123@h:5000/"
    assert cfg.hosts[0] == "http://u:Pw0rd123@h:5000/" and cfg.hosts[1] == "plain"
    assert OmegaConf.to_container(cfg, resolve=False)["tracker"]["copy"] == "${tracker.uri}"


def test_the_secret_scan_survives_another_thread_unsetting_a_variable():
    """MLflow 3's telemetry thread unsets _MLFLOW_TELEMETRY_SESSION_ID when its config fetch
    fails (offline), at any moment; os.environ.items() lists the names, then reads each, so a
    scan meanwhile raised KeyError (a sweep's parent run was lost to it). In a process of its
    own (setenv beside native threads is unsafe), a thread sets and unsets a variable nonstop
    while the scan and the environment copies run for a second (dict(os.environ) raised ~20
    times a second like this on a 2-core CPU)."""
    script = textwrap.dedent("""
        import os, threading, time
        from rlexp.base import redact
        from rlexp.base.runtime import environment

        stop = threading.Event()

        def churn():
            while not stop.is_set():
                os.environ["_RLEXP_TEST_RACE"] = "x"
                os.environ.pop("_RLEXP_TEST_RACE", None)

        thread = threading.Thread(target=churn)
        thread.start()
        calls, end = 0, time.monotonic() + 1.0
        try:
            while time.monotonic() < end:
                redact.secret_values()
                redact.current_secrets()
                assert os.environ["PATH"] == environment()["PATH"]
                calls += 1
        finally:
            stop.set()
            thread.join()
        print(calls)
    """)
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert int(proc.stdout) > 100
