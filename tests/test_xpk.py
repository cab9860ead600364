"""The XPK launcher: pure rules (fast) and a real sweep through the real xpk CLI's --dry-run.

xpk's dry run prints the gcloud/kubectl commands it would run and runs none of them; it needs
no gcloud, kubectl or credentials as long as --project and --zone are given (the launcher
passes placeholders in a dry run). Found: $RLEXP_XPK_BIN, `xpk` on PATH, or /opt/xpk/bin/xpk
(a separate venv: xpk pins protobuf 5 / packaging 24, older than this environment's).
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hydra.core.override_parser.overrides_parser import OverridesParser

from conftest import require
from helpers import cli, one_line_exit_2, said
from hydra_plugins.rlexp_xpk_launcher import commands as xc
from rlexp.base.runtime import environment  # os.environ copied safely from other threads

ROOT = Path(__file__).resolve().parents[1]


def find_xpk() -> str | None:
    for candidate in (os.environ.get("RLEXP_XPK_BIN"), shutil.which("xpk"), "/opt/xpk/bin/xpk"):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return candidate
    return None


@pytest.fixture(scope="module")
def xpk_bin() -> str:
    found = find_xpk()
    require(found is not None, "xpk is not installed (nor is $RLEXP_XPK_BIN set)",
            "bash scripts/setup")
    return found


# ------------------------------------------------------------------------------ pure rules


def test_workload_names_are_valid_deterministic_and_distinct():
    a = xc.workload_name("rlexp", "sweep_abc", 0, ["hardware=v6e-8", "train.steps=2"])
    assert a == xc.workload_name("rlexp", "sweep_abc", 0, ["train.steps=2", "hardware=v6e-8"])
    assert a != xc.workload_name("rlexp", "sweep_abc", 1, ["hardware=v5p-64", "train.steps=2"])
    assert a != xc.workload_name("rlexp", "other", 0, ["hardware=v6e-8", "train.steps=2"])
    # Launch-only overrides (the launcher, the sweep file) are not part of the identity.
    assert a == xc.workload_name("rlexp", "sweep_abc", 0,
                                 ["hardware=v6e-8", "train.steps=2", "hydra.launcher.dry_run=true"])
    long = xc.workload_name("My_Very.Long Prefix" * 4, "s", 123, [])
    assert len(long) <= 40 and xc._WORKLOAD_RE.fullmatch(long)
    assert xc.workload_name("9lives", "s", 0, [])[0].isalpha()


@pytest.mark.parametrize("value", [None, True, False, 0, 3, 0.04, 1e-5, "gsm8k", "a b",
                                   "it's", "true", "1.5", "/data/x.jsonl", "v5p-64",
                                   [1, 2], {"fsdp": 2, "tp": 1}, ""])
def test_format_value_round_trips_through_hydras_parser(value):
    text = xc.format_value(value)
    parsed = OverridesParser.create().parse_overrides([f"k={text}"])[0].value()
    if isinstance(value, float):
        assert float(parsed) == pytest.approx(value)
    else:
        assert parsed == value


def test_resolved_overrides_make_the_sweep_file_explicit():
    job = {"algo": {"epsilon": 0.1, "num_iterations": 2}, "train": {"steps": 2}}
    plain = {"algo": {"epsilon": 0.1, "num_iterations": 1}, "train": {"steps": 2}}
    out = xc.resolved_overrides(["+sweep=epsilon", "algo.epsilon=0.1", "train.steps=2",
                                 "hydra.launcher.dry_run=true"], job, plain)
    assert out == ["algo.epsilon=0.1", "train.steps=2", "algo.num_iterations=2"]


def test_argv_create_vs_pathways_and_dry_run():
    params = dict(xpk="xpk", cluster="c", docker_image="img:1", base_docker_image=None,
                  script_dir=None, num_slices=2, max_restarts=0, extra_args=["--spot"])
    common = dict(command="python -m rlexp hardware=v6e-8", project="p", zone="us-east5-b",
                  priority="low", env={"A": "1"})
    a = xc.build_argv(params, name="w", tpu_type="v6e-8", pathways=False, dry_run=True,
                      **common)
    assert a[:3] == ("xpk", "workload", "create") and a[-1] == "--dry-run"
    assert a[a.index("--tpu-type") + 1] == "v6e-8" and a[a.index("--num-slices") + 1] == "2"
    assert a[a.index("--docker-image") + 1] == "img:1" and "--spot" in a
    b = xc.build_argv(params, name="w", tpu_type="v5p-64", pathways=True, dry_run=False,
                      **common)
    assert b[2] == "create-pathways" and "--dry-run" not in b
    cmd = xc.shell_command("python -m rlexp", ["dataset.path='/x y'", "a=1"])
    assert shlex.split(cmd) == ["python", "-m", "rlexp", "dataset.path='/x y'", "a=1"]


def test_priority_comes_from_the_launcher_then_the_recipe_then_xpks_default():
    assert xc.workload_priority(None, None) == "medium"
    assert xc.workload_priority(None, "high") == "high"  # the recipe's run.priority
    assert xc.workload_priority("low", "high") == "low"  # hydra.launcher.priority wins
    with pytest.raises(ValueError, match="hydra.launcher.priority='urgent' is not an xpk "
                                         "priority; valid choices are: very-low, low, medium"):
        xc.workload_priority("urgent", None)
    with pytest.raises(ValueError, match="run.priority='top'"):
        xc.workload_priority(None, "top")


def test_the_pathways_recipes_ask_for_high_priority_and_a_bad_one_is_refused(compose_config):
    """MaxText's Pathways tutorial submits its 70B GRPO with `--priority=high`: its recipe and
    the two that extend it say so in run.priority; the single-host ones leave xpk's default."""
    from rlexp.base.errors import UserError

    for name in ("maxtext_llama3.1-70b_grpo_pathways", "maxtext_llama3.1-70b_grpo_v5p-128",
                 "maxtext_llama3.3-70b_grpo_v5p-256"):
        assert compose_config(f"experiment={name}").run.priority == "high", name
    assert compose_config("experiment=maxtext_llama3.1-8b_grpo").run.priority is None
    with pytest.raises(UserError, match=r"run.priority='urgent' is invalid: valid choices are "
                                        r"very-low, low, medium, high, very-high, null"):
        compose_config("run.priority=urgent")


def test_the_priorities_are_xpks_and_the_schemas(xpk_bin):
    from rlexp.config.schema import Config
    from rlexp.config.validate import knobs

    assert {key: spec for key, _, spec, _ in knobs(Config())}["run.priority"].choices == \
        xc.PRIORITIES
    help_text = subprocess.run([xpk_bin, "workload", "create", "--help"], capture_output=True,
                               text=True, timeout=120).stdout
    choices = re.search(r"--priority \{([^}]*)\}", help_text)
    assert choices and tuple(choices[1].split(",")) == xc.PRIORITIES, help_text[:2000]


def test_secrets_are_named_in_an_env_file_never_given_by_value():
    from rlexp.base.errors import UserError
    from rlexp.base.secret_env import launcher_secrets

    environ = {"HF_TOKEN": "hf_abcdef123456", "WANDB_API_KEY": "k" * 12, "HOME": "/root"}
    assert launcher_secrets(["HF_TOKEN", "WANDB_API_KEY", "HF_TOKEN"], [], environ,
                               {"A": "1"}) == ["HF_TOKEN", "WANDB_API_KEY"]
    for names, env, needle in ((["HF-TOKEN"], {}, "not an environment variable name"),
                               (["HOME"], {}, "HOME is not named like a secret"),
                               (["HF_TOKEN"], {"HF_TOKEN": "x"}, "also in the jobs' environment"),
                               (["GH_TOKEN"], {}, "GH_TOKEN is not set in this environment")):
        with pytest.raises(UserError, match=f"hydra.launcher.secrets: .*{needle}"):
            launcher_secrets(names, [], environ, env)
    # secrets_if_set (default [HF_TOKEN]): forwarded when set here, and not in the jobs' env
    assert launcher_secrets([], ["HF_TOKEN"], environ, {}) == ["HF_TOKEN"]
    assert launcher_secrets([], ["HF_TOKEN"], {"HOME": "/root"}, {}) == []
    assert launcher_secrets([], ["HF_TOKEN"], environ, {"HF_TOKEN": "x"}) == []
    text = xc.env_file_text({"A": "1", "URI": "http://h:5000/x?y=1"}, ["HF_TOKEN"])
    assert text == "A=1\nURI=http://h:5000/x?y=1\nHF_TOKEN\n"
    assert "hf_abcdef" not in text
    with pytest.raises(ValueError, match="hydra.launcher.env: B's value spans several lines"):
        xc.env_file_text({"B": "x\ny"}, ["HF_TOKEN"])
    assert xc.shown_env({"A": "1"}, ["HF_TOKEN"]) == "A=1 HF_TOKEN=***"
    params = dict(xpk="xpk", cluster="c", docker_image="i", base_docker_image=None,
                  script_dir=None, num_slices=1, max_restarts=0, extra_args=[])
    common = dict(name="w", tpu_type="v6e-8", pathways=False, command="c", project="p",
                  zone="z", priority="high", env={"A": "1"}, dry_run=False)
    argv = xc.build_argv(params, **common, env_file="/tmp/x/workload.env")
    assert argv[argv.index("--env-file") + 1] == "/tmp/x/workload.env" and "--env" not in argv
    assert argv[argv.index("--priority") + 1] == "high"
    assert "--env-file" not in xc.build_argv(params, **common)  # no secrets: --env NAME=value


# --------------------------------------------------------------------- real xpk, dry run


def _run(args: list[str], cwd: Path, xpk: str, timeout: int = 300,
         env: dict | None = None) -> subprocess.CompletedProcess:
    """helpers.cli with this xpk binary."""
    return cli(*args, cwd=cwd, env={"RLEXP_XPK_BIN": xpk, **(env or {})}, timeout=timeout)


# What a create-pathways workload's command starts with (MaxText's rl_on_multi_host tutorial).
PROXY_ENV = ("JAX_PLATFORMS=proxy", "JAX_BACKEND_TARGET=grpc://127.0.0.1:29000",
             "ENABLE_PATHWAYS_PERSISTENCE=1")

# Never contacted (a dry run creates no MLflow run); its password is never printed.
SERVER = "http://rlexp:s3cret@127.0.0.1:5999"
SHOWN = "http://rlexp:***@127.0.0.1:5999"
OUT = "run.output_uri=gs://bucket/rlexp"  # a pod's own disk goes away with it


def test_outputs_on_the_pods_disk_are_refused_in_one_line(tmp_path, xpk_bin):
    proc = _run(["-m", "hydra/launcher=xpk", "hydra.launcher.dry_run=true", "tracker=none",
                 "hardware=v6e-8"], tmp_path, xpk_bin)
    assert proc.returncode == 2, proc.stderr
    lines = said(proc.stderr)
    assert len(lines) == 1 and "run.output_uri=gs://" in lines[0], proc.stderr
    assert not (tmp_path / "outputs").exists()


def _env_of(argv: list[str]) -> dict[str, str]:
    return dict(argv[i + 1].split("=", 1) for i, a in enumerate(argv) if a == "--env")


def test_a_store_on_this_machine_is_refused_in_one_line(tmp_path, xpk_bin):
    proc = _run(["-m", "hydra/launcher=xpk", "hydra.launcher.dry_run=true", OUT,
                 "hardware=v6e-8,v5p-64"], tmp_path, xpk_bin)  # default: sqlite under cwd
    assert proc.returncode == 2, proc.stderr
    lines = said(proc.stderr)
    assert len(lines) == 1 and "sqlite:///" in lines[0] and "tracker.uri=http://" in lines[0]
    assert not (tmp_path / "outputs").exists()


@pytest.mark.slow
def test_sweep_dry_run_prints_one_xpk_command_per_job(tmp_path, xpk_bin):
    proc = _run(["-m", "hydra/launcher=xpk", "hydra.launcher.dry_run=true", OUT,
                 "hardware=v6e-8,v5p-64", "train.steps=2", f"tracker.uri={SERVER}"],
                tmp_path, xpk_bin)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("[xpk #")]
    assert len(lines) == 2, out[-3000:]
    argvs = [shlex.split(ln.split("] ", 1)[1]) for ln in lines]
    by_type = {a[a.index("--tpu-type") + 1]: a for a in argvs}
    assert set(by_type) == {"v6e-8", "v5p-64"}
    assert by_type["v6e-8"][1:3] == ["workload", "create"]          # one host
    assert by_type["v5p-64"][1:3] == ["workload", "create-pathways"]  # 8 hosts
    for tpu, argv in by_type.items():
        assert argv[0] == xpk_bin and argv[-1] == "--dry-run"
        command = shlex.split(argv[argv.index("--command") + 1])
        if tpu == "v5p-64":  # Pathways: the proxy is set before JAX, as MaxText's command
            assert command[:3] == list(PROXY_ENV)
            command = command[3:]
        assert command[:3] == ["python", "-m", "rlexp"]
        assert f"hardware={tpu}" in command and "train.steps=2" in command
        assert not any(c.startswith(("hydra", "+sweep")) for c in command)
        # what the pod is given to log into the sweep's store, under its parent run
        env = _env_of(argv)
        assert env["MLFLOW_TRACKING_URI"] == SHOWN and env["RLEXP_SWEEP_JOBS"] == "2"
        assert "created at submission" in env["RLEXP_PARENT_RUN_ID"]
    assert proc.stdout.count(f"tracking: {SHOWN} parent run: ") == 2
    assert "s3cret" not in proc.stdout + proc.stderr
    # xpk itself ran: its dry run lists the kubectl apply it skipped, for each workload.
    assert out.count("would run: kubectl apply") == 2, out[-3000:]
    # A dry run creates nothing: no sweep dir, no workloads.json, no MLflow parent run.
    assert not (tmp_path / "outputs").exists()

    # Same command again: same workload names (xpk refuses duplicates).
    again = _run(["-m", "hydra/launcher=xpk", "hydra.launcher.dry_run=true", OUT,
                  "hardware=v6e-8,v5p-64", "train.steps=2", f"tracker.uri={SERVER}"],
                 tmp_path, xpk_bin)
    assert again.returncode == 0, again.stderr[-2000:]
    names2 = [shlex.split(ln.split("] ", 1)[1]) for ln in again.stdout.splitlines()
              if ln.startswith("[xpk #")]
    assert sorted(a[a.index("--workload") + 1] for a in names2) == \
        sorted(a[a.index("--workload") + 1] for a in argvs)


FAKE_XPK = """#!/bin/sh
# Stands in for xpk on a real cluster: records its argv, creates nothing.
printf '%s\\n' "$@" >> "$XPK_ARGV_LOG"; printf '%s\\n' "--" >> "$XPK_ARGV_LOG"
"""


@pytest.mark.slow
def test_submitted_jobs_report_to_the_parent_which_stays_running(tmp_path):
    """Acceptance chain for xpk against a real `mlflow server`: the workload gets the store
    and the parent run id; the parent stays RUNNING after submission; the job, started the
    way the pod starts it, becomes the parent's child and (last of 1) closes the parent;
    `python -m rlexp.report <parent id>` shows it."""
    from mlflow import MlflowClient

    from rlexp.tracking.ui import free_port
    from sweep_helpers import TINY
    from test_tracking_server import Server

    fake = tmp_path / "xpk"
    fake.write_text(FAKE_XPK)
    fake.chmod(0o755)
    log = tmp_path / "argv.log"
    server = Server(tmp_path / "server" / "mlflow.db", free_port()).start()
    try:
        proc = _run(["-m", "hydra/launcher=xpk", "hydra.launcher.docker_image=img",
                     "hydra.launcher.project=p", "hydra.launcher.zone=z", "hardware=v6e-8", OUT,
                     f"tracker.uri={server.url}", "tracker.experiment=xpk-remote"],
                    tmp_path, str(fake), env={"XPK_ARGV_LOG": str(log)})
        assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
        (argv,) = [chunk.strip().splitlines() for chunk in log.read_text().split("--\n")
                   if chunk.strip()]
        env = _env_of(argv)
        (sweep_dir,) = (tmp_path / "outputs" / "sweeps").iterdir()
        parent = json.loads((sweep_dir / "parent_run.json").read_text())
        assert env == {"MLFLOW_TRACKING_URI": server.url, "RLEXP_PARENT_RUN_ID": parent["run_id"],
                       "RLEXP_SWEEP_JOBS": "1"}
        client = MlflowClient(server.url)
        assert client.get_run(parent["run_id"]).info.status == "RUNNING"
        assert "stays RUNNING" in proc.stdout

        # The pod: `python -m rlexp <overrides>` with the workload's environment (tiny on CPU).
        pod_cwd = tmp_path / "pod"
        pod_cwd.mkdir()
        child = subprocess.run(
            [sys.executable, "-m", "rlexp", *TINY, "tracker.experiment=xpk-remote"],
            cwd=pod_cwd, env={**environment(), **env}, capture_output=True, text=True, timeout=600)
        assert child.returncode == 0, child.stderr[-3000:]
        assert "all 1 jobs reported" in child.stdout
        run = client.get_run(parent["run_id"])
        assert run.info.status == "FINISHED"
        (kid,) = client.search_runs([parent["experiment_id"]],
                                    f"tags.mlflow.parentRunId = '{parent['run_id']}'")
        assert kid.info.status == "FINISHED"
        report = subprocess.run([sys.executable, "-m", "rlexp.report", parent["run_id"]],
                                cwd=tmp_path, env={**environment(), "MLFLOW_TRACKING_URI": server.url},
                                capture_output=True, text=True, timeout=300)
        assert report.returncode == 0, report.stderr[-2000:]
        assert kid.info.run_name in report.stdout
    finally:
        server.stop()


@pytest.mark.slow
def test_sweep_file_settings_travel_with_the_job(tmp_path, xpk_bin):
    proc = _run(["+sweep=epsilon", "hydra/launcher=xpk", "hydra.launcher.dry_run=true", OUT,
                 "hardware=v6e-8", "algo.epsilon=0.1,0.3", "tracker=none"], tmp_path, xpk_bin)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
    argvs = [shlex.split(ln.split("] ", 1)[1]) for ln in proc.stdout.splitlines()
             if ln.startswith("[xpk #")]
    commands = [shlex.split(a[a.index("--command") + 1]) for a in argvs]
    assert len(commands) == 2
    for command in commands:
        assert "algo.num_iterations=2" in command  # from the sweep file
        assert not any("sweep" in c for c in command)  # the pod runs ONE job, not a sweep
    assert {c for cmd in commands for c in cmd if c.startswith("algo.epsilon")} == \
        {"algo.epsilon=0.1", "algo.epsilon=0.3"}


@pytest.mark.slow
def test_cpu_profile_is_refused_before_anything_is_submitted(tmp_path, xpk_bin):
    proc = _run(["-m", "hydra/launcher=xpk", "hydra.launcher.dry_run=true", OUT,
                 "hardware=v6e-8,cpu", "tracker=none"], tmp_path, xpk_bin)
    assert proc.returncode == 2
    assert "TPU hardware profile" in proc.stderr
    assert "Traceback" not in proc.stderr
    assert not list((tmp_path / "outputs").rglob("workloads.json"))


def _workloads(proc: subprocess.CompletedProcess) -> list[list[str]]:
    return [shlex.split(ln.split("] ", 1)[1]) for ln in proc.stdout.splitlines()
            if ln.startswith("[xpk #")]


@pytest.mark.slow
def test_split_slices_go_to_pathways_and_multi_controller_slices_run_one_process_per_host(
        tmp_path, xpk_bin):
    """xpk's own --dry-run, verbose: its JobSet manifests are printed. The seeds' flagship
    (v5p-64, split, runtime=pathways) is `create-pathways` with the proxy environment in the
    command; the same slice as multi_controller (colocated) is `create`, whose JobSet runs
    the command on each of the 8 hosts (parallelism 8), without the proxy."""
    common = ["-m", "hydra/launcher=xpk", "hydra.launcher.dry_run=true",
              "hydra.launcher.verbose=true", OUT, "tracker=none"]
    flagship = _run([*common, "experiment=maxtext_llama3.1-70b_grpo_pathways"], tmp_path, xpk_bin)
    assert flagship.returncode == 0, (flagship.stdout + flagship.stderr)[-3000:]
    (argv,) = _workloads(flagship)
    assert argv[1:3] == ["workload", "create-pathways"]
    assert argv[argv.index("--tpu-type") + 1] == "v5p-64"
    assert argv[argv.index("--priority") + 1] == "high"  # the recipe's run.priority
    command = shlex.split(argv[argv.index("--command") + 1])
    assert tuple(command[:3]) == PROXY_ENV and command[3:6] == ["python", "-m", "rlexp"]
    assert "experiment=maxtext_llama3.1-70b_grpo_pathways" in command
    # xpk put that command, proxy variables first, into the head's container.
    assert "(JAX_PLATFORMS=proxy JAX_BACKEND_TARGET=grpc://127.0.0.1:29000 " \
        "ENABLE_PATHWAYS_PERSISTENCE=1 python -m rlexp" in flagship.stdout

    per_host = _run([*common, "hardware=v5p-64", "hardware.runtime=multi_controller",
                     "hardware.split=colocated", "hardware.trainer_mesh.fsdp=32",
                     "hardware.rollout_mesh.fsdp=32"], tmp_path, xpk_bin)
    assert per_host.returncode == 0, (per_host.stdout + per_host.stderr)[-3000:]
    (argv,) = _workloads(per_host)
    assert argv[1:3] == ["workload", "create"]
    assert argv[argv.index("--priority") + 1] == "medium"  # no recipe: xpk's default
    command = shlex.split(argv[argv.index("--command") + 1])
    assert command[:3] == ["python", "-m", "rlexp"] and "hardware.runtime=multi_controller" in command
    assert "JAX_PLATFORMS" not in per_host.stdout
    assert re.search(r"^\s*parallelism: 8\b", per_host.stdout, re.M), per_host.stdout[-3000:]
    assert not (tmp_path / "outputs").exists()


def test_a_launch_without_an_image_is_refused_in_one_line(tmp_path):
    """No docker_image and no base image + script_dir: xpk would build on python:3.10, which
    has neither rlexp nor JAX. Refused before xpk is called (the stand-in records any call)."""
    fake = tmp_path / "xpk"
    fake.write_text(FAKE_XPK)
    fake.chmod(0o755)
    log = tmp_path / "argv.log"
    for extra in ([], ["hydra.launcher.script_dir=."]):  # a script dir alone is not enough
        proc = cli("-m", "hydra/launcher=xpk", OUT, "tracker=none", "hardware=v6e-8", *extra,
                   cwd=tmp_path, env={"RLEXP_XPK_BIN": str(fake), "XPK_ARGV_LOG": str(log),
                                      "RLEXP_DOCKER_IMAGE": ""})
        one_line_exit_2(proc, "hydra.launcher.docker_image", "docker/tpu.Dockerfile",
                        "base_docker_image and script_dir")
    assert not log.exists()  # xpk was never called
    assert not (tmp_path / "outputs").exists()  # nor a sweep dir or parent run made


def test_the_images_install_this_checkout_with_its_own_pins():
    """docker/*.Dockerfile: the checkout they are built from (rlexp at the launching commit),
    its lock file, and the accelerator wheels of the JAX version pyproject.toml pins."""
    import tomllib

    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    jax = next(d for d in project["dependencies"] if d.startswith("jax=="))
    extras = project["optional-dependencies"]
    tpu, gpu = ((ROOT / "docker" / f"{k}.Dockerfile").read_text() for k in ("tpu", "gpu"))
    for text in (tpu, gpu):
        assert "COPY requirements.lock" in text and "pip install -r requirements.lock" in text
        assert "pip install --no-deps ." in text and "ARG RLEXP_COMMIT" in text
    assert extras["tpu"] == [jax.replace("jax==", "jax[tpu]==")]
    assert f'"{extras["tpu"][0]}"' in tpu and f'"{extras["pathways"][0]}"' in tpu
    assert f'"{extras["gpu"][0]}"' in gpu
    readme = (ROOT / "README.md").read_text()
    assert "docker build -f docker/tpu.Dockerfile" in readme  # the one documented command


TOKEN = "hf_rlexpTestToken123"  # never printed: the dry run shows HF_TOKEN=***


@pytest.mark.slow
def test_secrets_reach_the_pod_through_xpk_and_are_never_printed(tmp_path, xpk_bin):
    """xpk's own dry run, verbose (its JobSet manifests printed): HF_TOKEN named in
    hydra.launcher.secrets gets into the container's environment through --env-file, its
    value nowhere in the output; each job's priority is its run.priority (a recipe's) or
    xpk's default."""
    proc = _run(["-m", "hydra/launcher=xpk", "hydra.launcher.dry_run=true",
                 "hydra.launcher.verbose=true", "hydra.launcher.secrets=[HF_TOKEN]",
                 "+hydra.launcher.env.A_SETTING=on", OUT, "tracker=none", "hardware=v6e-8",
                 "run.priority=high,null"], tmp_path, xpk_bin, env={"HF_TOKEN": TOKEN})
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-3000:]
    assert TOKEN not in out
    argvs = _workloads(proc)
    assert sorted(a[a.index("--priority") + 1] for a in argvs) == ["high", "medium"]
    for argv in argvs:
        assert "--env" not in argv and "--env-file" in argv
    assert proc.stdout.count("    env-file: A_SETTING=on HF_TOKEN=***") == 2
    # xpk read the file and put both variables into the container (the manifest, masked)
    assert re.search(r"- name: HF_TOKEN\s+value: \"\*\*\*\"", proc.stdout), proc.stdout[-3000:]
    assert re.search(r"- name: A_SETTING\s+value: \"on\"", proc.stdout)
    assert not list(Path(os.environ.get("TMPDIR", "/tmp")).glob("rlexp-xpk-env-*/workload.env"))


def test_a_secret_not_set_here_is_refused_in_one_line(tmp_path):
    fake = tmp_path / "xpk"
    fake.write_text(FAKE_XPK)
    fake.chmod(0o755)
    log = tmp_path / "argv.log"
    proc = cli("-m", "hydra/launcher=xpk", "hydra.launcher.docker_image=img", OUT,
               "tracker=none", "hardware=v6e-8", "hydra.launcher.secrets=[RLEXP_NO_SUCH_TOKEN]",
               cwd=tmp_path, env={"RLEXP_XPK_BIN": str(fake), "XPK_ARGV_LOG": str(log)})
    one_line_exit_2(proc, "hydra.launcher.secrets: RLEXP_NO_SUCH_TOKEN is not set in this "
                          "environment")
    assert not log.exists()  # xpk was never called
    assert not (tmp_path / "outputs").exists()
