"""Secrets never reach MLflow or the run dir: names, free text, Hydra's saved files, a store."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from rlexp.base.events import RunInfo
from rlexp.base.redact import MASK, is_secret_key, redact_params, redact_text, scrub_run_dir
from rlexp.tracking import prepare_store
from rlexp.tracking.listener import MlflowListener
from helpers import cli

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
