"""Hydra launcher that turns every job of a sweep into an XPK workload on GKE (TPU slices).
Non-blocking: it returns once xpk created the workloads (or, with dry_run, printed what it would
run). Results live on the cluster, so a sweeper needing a metric back (Optuna) cannot use it."""

# No `from __future__ import annotations`: see config.py.
import logging
import os
import shlex
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Optional, Sequence

from hydra.core.hydra_config import HydraConfig
from hydra.core.utils import JobReturn, JobStatus
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from rlexp.base.errors import UserError
from rlexp.base.files import read_json_object, remove_dry_run_dir, write_json_atomic
from rlexp.base.redact import redact_text
from rlexp.base.runtime import environment
from rlexp.base.secret_env import launcher_secrets

from .commands import (Workload, build_argv, env_file_text, is_launch_only, resolved_overrides,
                       shell_command, shown_env, workload_name, workload_priority)

# rlexp.tracking.remote_jobs's names (not imported here: it takes 0.2 s, plugin scans included)
ENV_URI, ENV_PARENT = "MLFLOW_TRACKING_URI", "RLEXP_PARENT_RUN_ID"

log = logging.getLogger(__name__)

WORKLOADS_FILE = "workloads.json"
# xpk's dry run announces each command it skips with this sentence, the command on the next line.
_DRY_RUN_MARK = "not running since it is a dry run"


class XpkLauncher(Launcher):
    def __init__(self, **params: Any) -> None:
        # Resolved once, here; per-job values come from each job's own config (hardware).
        self.params = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v)
                       else v for k, v in params.items()}
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.task_function: Optional[TaskFunction] = None
        # Given to every workload: its run nests under the sweep's parent run (remote_jobs.job_env).
        self.tracking_env: dict = {}
        # With hydra.launcher.secrets: the workloads' xpk --env-file and its printed line.
        self.env_file: Optional[str] = None
        self.env_shown = ""
        self.env_dir: Any = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def _job_config(self, overrides: list[str], job_num: int) -> DictConfig:
        assert self.hydra_context is not None and self.config is not None
        cfg = self.hydra_context.config_loader.load_sweep_config(self.config, overrides)
        with open_dict(cfg.hydra.job):
            cfg.hydra.job.num = job_num
            cfg.hydra.job.id = f"xpk_{job_num}"
        return cfg

    def _plan(self, overrides: list[str], job_num: int, sweep_id: str) -> Workload:
        p = self.params
        cfg = self._job_config(overrides, job_num)
        # Interpolations under hydra.* (the job's subdir name) read HydraConfig.
        HydraConfig.instance().set_config(cfg)
        subdir = str(OmegaConf.select(cfg, "hydra.sweep.subdir", default=f"{job_num}"))
        hardware = OmegaConf.select(cfg, "hardware")
        if hardware is None or OmegaConf.select(hardware, "accelerator_type") is None:
            raise ValueError(f"job #{job_num} {overrides}: no hardware.accelerator_type to "
                             "turn into an xpk --tpu-type")
        platform = str(OmegaConf.select(hardware, "platform", default="tpu"))
        tpu_type = str(hardware.accelerator_type)
        if platform != "tpu":
            raise ValueError(f"job #{job_num}: hardware={hardware.get('name', tpu_type)} is a "
                             f"{platform} profile; the xpk launcher submits TPU slices: pick a "
                             "TPU hardware profile (e.g. hardware=v6e-8) or another launcher")
        # hardware.runtime=pathways (v5p-64): `create-pathways`, ONE controller on the head pod
        # reaching every host's chips through its proxy. Else `create`, whose JobSet runs the
        # command per host (joined by jax.distributed's GKE TPU detection).
        pathways = OmegaConf.select(hardware, "runtime", default="single") == "pathways"

        job_cfg = _task_part(cfg)
        plain = [o for o in overrides if not is_launch_only(o)]
        plain_cfg = job_cfg if len(plain) == len(overrides) else \
            _task_part(self._job_config(plain, job_num))
        job_args = resolved_overrides(overrides, job_cfg, plain_cfg)
        if ENV_URI in self.tracking_env:  # the store travels in the env (printed redacted),
            job_args = [a for a in job_args  # not as an override in the pod's command line
                        if not a.lstrip("+~").startswith("tracker.uri=")]
        command = shell_command(p["program"], job_args)
        if pathways:  # as MaxText's create-pathways command lines: the proxy set before JAX
            from rlexp.planning.pathways import command_prefix

            command = f"{command_prefix()} {command}"

        dry_run = bool(p["dry_run"])
        if not (dry_run or p["docker_image"] or p["base_docker_image"] and p["script_dir"]):
            # xpk would otherwise wrap its default python:3.10 base image, which lacks rlexp
            # and JAX: the workload would start on the slice and die at `python -m rlexp`.
            raise ValueError("hydra.launcher.docker_image (or $RLEXP_DOCKER_IMAGE) is required: "
                             "an image with rlexp installed (docker build -f docker/tpu.Dockerfile "
                             "-t IMAGE .); or set both hydra.launcher.base_docker_image and "
                             "script_dir to let xpk build one")
        project = p["project"] or (p["dry_run_project"] if dry_run else None)
        zone = p["zone"] or (p["dry_run_zone"] if dry_run else None)
        # The subdir is the job's deterministic name: the same job of a sweep, the same workload.
        name = workload_name(p["workload_prefix"], sweep_id, job_num, [subdir])
        priority = workload_priority(p["priority"],
                                     OmegaConf.select(cfg, "run.priority", default=None))
        argv = build_argv(p, name=name, tpu_type=tpu_type, pathways=pathways, command=command,
                          project=project, zone=zone, priority=priority,
                          env=self._workload_env(), dry_run=dry_run, env_file=self.env_file)
        return Workload(name=name, subcommand="create-pathways" if pathways else "create",
                        tpu_type=tpu_type, command=command, argv=argv, job_num=job_num,
                        overrides=list(overrides), job_subdir=subdir)

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        assert self.config is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        dry_run = bool(self.params["dry_run"])
        # A dry run creates nothing: no parent run (the sweep callback skips it), no sweep
        # dir, no workloads.json; xpk's output goes to a temporary dir.
        scratch = tempfile.TemporaryDirectory(prefix="rlexp-xpk-") if dry_run else None
        self.tracking_env = _tracking_env(self.config, sweep_dir, len(job_overrides), dry_run)
        dry = " (dry run)" if dry_run else ""
        log.info(f"XPK launcher{dry}: {len(job_overrides)} workload(s), sweep dir {sweep_dir}")

        # Plan every job before submitting any: a job xpk cannot take (a CPU profile, no
        # accelerator) stops the sweep before anything reaches the cluster.
        original = HydraConfig.instance().cfg
        try:
            self._write_env_file()
            plans = [self._plan(list(o), initial_job_idx + i, sweep_dir.name)
                     for i, o in enumerate(job_overrides)]
        except (ValueError, UserError) as exc:
            # A configuration mistake, not a crash: one line, exit 2, nothing submitted.
            print(f"rlexp: error: {exc}", file=sys.stderr, flush=True)
            self._remove_env_file()
            remove_dry_run_dir(sweep_dir)  # nothing half-made: Hydra's multirun.yaml only
            sys.exit(2)
        finally:
            HydraConfig.instance().cfg = original  # type: ignore[assignment]

        logs = Path(scratch.name) if scratch is not None else sweep_dir / "xpk"
        logs.mkdir(parents=True, exist_ok=True)
        with ThreadPoolExecutor(max_workers=max(1, int(self.params["max_parallel"]))) as pool:
            outcomes = list(pool.map(lambda pl: self._submit(pl, logs), plans))

        records = []
        for wl, (rc, error, seconds) in zip(plans, outcomes):
            print(f"[xpk #{wl.job_num}] {redact_text(shlex.join(wl.argv))}", flush=True)
            if self.env_shown:
                print(f"    env-file: {redact_text(self.env_shown)}", flush=True)
            if self.tracking_env:
                print(f"    tracking: {redact_text(self.tracking_env.get(ENV_URI, ''))} "
                      f"parent run: {self.tracking_env.get(ENV_PARENT)}", flush=True)
            log_path = logs / f"{wl.name}.log"
            if dry_run:
                for cmd in _dry_run_commands(log_path):
                    print(f"    would run: {cmd}", flush=True)
            if self.params["verbose"]:
                print(log_path.read_text(), flush=True)
            state = "failed" if rc else ("dry-run" if dry_run else "submitted")
            log.info(f"#{wl.job_num} {wl.subcommand} {wl.name} ({wl.tpu_type}): {state}"
                     + (f": {error}" if error else ""))
            records.append({
                "workload": wl.name, "subcommand": wl.subcommand, "tpu_type": wl.tpu_type,
                "job_num": wl.job_num, "job": wl.job_subdir, "overrides": wl.overrides,
                "command": wl.command, "xpk_argv": [redact_text(a) for a in wl.argv],
                "cluster": self.params["cluster"], "dry_run": dry_run, "state": state,
                "returncode": rc, "error": error, "submit_s": round(seconds, 3),
                "time": time.time(), "log": str(log_path)})
        self._remove_env_file()
        if scratch is not None:
            scratch.cleanup()
            remove_dry_run_dir(sweep_dir)
        else:
            _record_workloads(sweep_dir, records)
            self._tag_parent_run(records)
        return [self._job_return(wl, rc, error) for wl, (rc, error, _) in zip(plans, outcomes)]

    def _workload_env(self) -> dict:
        """Every workload's environment: hydra.launcher.env, the sweep's store and parent run,
        and the real values behind mask_argv's placeholders (the pod's rlexp puts them back)."""
        from rlexp.base.redact import SECRETS_ENV
        masked = {SECRETS_ENV: os.environ[SECRETS_ENV]} if os.environ.get(SECRETS_ENV) else {}
        return {**(self.params["env"] or {}), **self.tracking_env, **masked}

    def _write_env_file(self) -> None:
        """With hydra.launcher.secrets: the environment as one xpk --env-file in a private temp
        dir (secrets by name only; xpk reads them from its env); else --env NAME=value."""
        env = self._workload_env()
        names = launcher_secrets(self.params.get("secrets") or [],
                                 self.params.get("secrets_if_set") or [], os.environ, env)
        if not names:
            return
        text = env_file_text(env, names)
        self.env_dir = tempfile.TemporaryDirectory(prefix="rlexp-xpk-env-")  # mode 0700
        path = Path(self.env_dir.name) / "workload.env"
        path.write_text(text)
        self.env_file, self.env_shown = str(path), shown_env(env, names)

    def _remove_env_file(self) -> None:
        if self.env_dir is not None:
            self.env_dir.cleanup()
            self.env_dir = None

    def _submit(self, wl: Workload, logs: Path) -> tuple[int, Optional[str], float]:
        started = time.monotonic()
        log_path = logs / f"{wl.name}.log"
        try:
            proc = subprocess.run(list(wl.argv), capture_output=True, text=True,
                                  timeout=int(self.params["timeout_s"]),
                                  env={**environment(), "PYTHONUNBUFFERED": "1"})
        except FileNotFoundError:
            msg = (f"xpk executable {wl.argv[0]!r} not found: pip install xpk (or set "
                   f"RLEXP_XPK_BIN / hydra.launcher.xpk)")
            log_path.write_text(msg + "\n")
            return 127, msg, time.monotonic() - started
        except subprocess.TimeoutExpired as exc:
            out = (exc.stdout or b"")
            log_path.write_text(out.decode() if isinstance(out, bytes) else str(out))
            return 124, f"xpk timed out after {exc.timeout} s", time.monotonic() - started
        # the workload's env may carry credentials (a tracking URL with a password)
        log_path.write_text(redact_text(f"$ {shlex.join(wl.argv)}\n{proc.stdout}{proc.stderr}"))
        error = None if proc.returncode == 0 else _last_error_line(proc.stdout + proc.stderr)
        return proc.returncode, error, time.monotonic() - started

    def _job_return(self, wl: Workload, rc: int, error: Optional[str]) -> JobReturn:
        ret = JobReturn(overrides=wl.overrides, working_dir=os.getcwd(),
                        task_name=str(self.config.hydra.job.name) if self.config else None,
                        status=JobStatus.FAILED if rc else JobStatus.COMPLETED)
        ret.return_value = (RuntimeError(f"xpk workload {wl.subcommand} {wl.name} exited {rc}: "
                                         f"{error}") if rc else wl.name)
        return ret

    def _tag_parent_run(self, records: list[dict]) -> None:
        """Tag the sweep's MLflow parent run with the workloads; never fatal (bookkeeping)."""
        run_id = self.tracking_env.get(ENV_PARENT)
        if not run_id:
            return
        try:
            import mlflow  # lazy: seconds of import, and only needed here

            client = mlflow.MlflowClient(tracking_uri=self.tracking_env[ENV_URI])
            client.set_tag(run_id, "xpk.workloads", ",".join(r["workload"] for r in records)[:5000])
            client.set_tag(run_id, "xpk.cluster", str(records[0]["cluster"]) if records else "")
            client.set_tag(run_id, "xpk.dry_run", str(any(r["dry_run"] for r in records)).lower())
            failed = [r["workload"] for r in records if r["returncode"] != 0]
            if failed:
                client.set_tag(run_id, "xpk.failed", ",".join(failed)[:5000])
        except Exception as exc:  # noqa: BLE001 - tracking must never break a submission
            log.warning(f"could not tag the MLflow parent run {run_id}: {exc}")


def _tracking_env(config: DictConfig, sweep_dir: Path, num_jobs: int, dry_run: bool) -> dict:
    """MLFLOW_TRACKING_URI, RLEXP_PARENT_RUN_ID and RLEXP_SWEEP_JOBS for every workload; in a
    dry run the parent does not exist yet (or is the one this sweep got when submitted)."""
    from rlexp.tracking.remote_jobs import ENV_JOBS, job_env
    env = job_env(sweep_dir, num_jobs)
    if env or not dry_run or OmegaConf.select(config, "tracker.name", default="mlflow") == "none":
        return env
    from rlexp.tracking.store import resolve_uri
    return {ENV_URI: resolve_uri(OmegaConf.select(config, "tracker.uri", default=None)),
            ENV_PARENT: "<the sweep's parent run, created at submission>", ENV_JOBS: str(num_jobs)}


def _task_part(cfg: DictConfig) -> dict:
    out = OmegaConf.to_container(cfg, resolve=False)
    assert isinstance(out, dict)
    out.pop("hydra", None)
    return OmegaConf.to_container(OmegaConf.create(out), resolve=True)  # type: ignore[return-value]


def _last_error_line(text: str) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "error" in ln.lower() or ln.startswith("[XPK]"):
            return ln[:500]
    return lines[-1][:500] if lines else "no output"


def _dry_run_commands(log_path: Path) -> list[str]:
    """The gcloud/kubectl commands xpk's dry run says it would have run, in order."""
    try:
        lines = log_path.read_text().splitlines()
    except OSError:
        return []
    return [lines[i + 1].strip() for i, ln in enumerate(lines[:-1]) if _DRY_RUN_MARK in ln]


def _record_workloads(sweep_dir: Path, records: list[dict]) -> None:
    """<sweep dir>/workloads.json: one entry per workload name, the latest submission wins."""
    path = sweep_dir / WORKLOADS_FILE
    previous = (read_json_object(path) or {}).get("workloads", [])
    by_name = {r["workload"]: r for r in previous if isinstance(r, dict) and "workload" in r}
    by_name.update({r["workload"]: r for r in records})
    write_json_atomic(path, {"workloads": sorted(by_name.values(),
                                                 key=lambda r: r.get("job_num", 0))})
