"""Pre-flight's refusals that need the world (files, user code, the store, vLLM, the memory plan,
disks, the launcher): one line and exit 2 before Hydra makes a dir or MLflow a run. Rules that
need only the Config are rlexp.config's; README.md's "Mistakes" table lists them all. CHECKS
run per job, in order; COMMAND_CHECKS once per command, first."""

from __future__ import annotations

import contextlib
import dataclasses
import importlib.util
import json
import os
import shlex
import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from omegaconf import OmegaConf

from rlexp.base.errors import UserError
from rlexp.base.plugins import resolve
from rlexp.base.redact import redact_uri
from rlexp.base.secret_env import launcher_secrets
from rlexp.config.rollouts import rollout_spec
from rlexp.config.schema import Config
from rlexp.data import rewards
from rlexp.data.loaders import dataset_file, read_rows
from rlexp.data.templates import PromptTemplate, shortest_answer
from rlexp.engine.checkpoint_store import human_bytes, nearest_existing
from rlexp.engine.export import find_checkpoint
from rlexp.inputs.model_files import check_model, model_dir
from rlexp.inputs.storage import check as check_output_uri
from rlexp.planning.plan import Plan, checkpoint_bytes, make_plan
from rlexp.tracking import default_uri
from rlexp.tracking.remote_jobs import check_sweep_store
from rlexp.tracking.store import check_scheme, classify, is_wrong, resolve_uri


@dataclass(frozen=True)
class CheckContext:
    """What the per-job checks know of the command (pre-flight makes it once, before the jobs)."""

    # The command's output dir (hydra.run.dir, or the sweep's): where the checkpoints go.
    output_dir: Path = Path("outputs")
    # The jobs run on other machines (xpk, SLURM), whose own pre-flight checks their imports.
    jobs_run_elsewhere: bool = False
    # Warning lines already printed for this command (a sweep's jobs share one context).
    said: set = dataclasses.field(default_factory=set, compare=False, hash=False)
    # A SLURM sweep: (hydra.launcher.timeout_min, None = each job's hardware.timeout_min;
    # hydra.launcher.signal_delay_s), for check_slurm_time. None: no SLURM launcher.
    slurm: Optional[tuple[Optional[int], int]] = None

    def warn(self, line: str) -> None:
        """One `rlexp: warning:` line, once per command (a re-run in the vLLM venv said it)."""
        if line not in self.said and not os.environ.get("RLEXP_VLLM_RERUN"):
            self.said.add(line)
            print(f"rlexp: warning: {line}", file=sys.stderr, flush=True)


def check_writable(path: Path) -> None:
    """The run/sweep dir can be made: its nearest existing ancestor is a writable dir."""
    probe = nearest_existing(path)
    if not probe.is_dir():  # the dir itself or one of its parents is a regular file
        raise UserError(f"hydra.run.dir={path}: {probe} is a file, not a directory; move it "
                        "away or set hydra.run.dir=/writable/path")
    if not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"hydra.run.dir={path}: cannot write under {probe} (permission denied); "
                        "run from a writable directory or set hydra.run.dir=/writable/path")


def check_model_files(cfg: Config, ctx: CheckContext) -> None:
    """A model.path given resolves (a local dir, the hub cache or a bucket), dry runs too."""
    if cfg.model.path is not None:
        check_model(cfg.model, cfg.run.cache_dir)


def check_model_path(cfg: Config, ctx: CheckContext) -> None:
    """Without model.path, the model needs no files (tiny's random init, a packaged model)."""
    if cfg.model.path is None:
        check_model(cfg.model, cfg.run.cache_dir)


def check_inputs(cfg: Config, ctx: CheckContext) -> None:
    """Files the run needs exist, before Hydra makes a dir or MLflow a run (cheap, no JAX)."""
    dataset_file(cfg.dataset)
    check_output_uri(cfg.run.output_uri)  # gs:// needs its filesystem backend
    if cfg.run.init_from:  # the origin has a checkpoint (read only when the run builds)
        find_checkpoint(cfg.run.init_from, default_uri(cfg))


def check_plugins(cfg: Config, ctx: CheckContext) -> None:
    """`_target_`s import, and each reward returns one float per completion on a probe."""
    kept = [f for f in cfg.reward.functions if cfg.run.dry_run is False
            or f._target_ not in rewards.NEEDS_MATH_VERIFY
            or importlib.util.find_spec("math_verify") is not None]
    if kept or not cfg.reward.functions:
        reward = dataclasses.replace(cfg.reward, functions=kept)
        rewards.for_run(dataclasses.replace(cfg, reward=reward))  # resolves and probes each
    resolve(cfg.dataset._target_, "dataset._target_")
    if "." in cfg.dataset.extractor:
        resolve(cfg.dataset.extractor, "dataset.extractor")
    PromptTemplate.from_config(cfg.dataset)  # prompt_file readable, {question} present


def refuse_unfit(plan: Plan) -> None:
    """The memory plan says the run fits its hardware (devices and host)."""
    if not plan.fits:
        raise UserError(plan.why)


def check_fits(cfg: Config, ctx: CheckContext) -> Plan:
    """The job's plan, made once; one that does not fit is refused (a dry run's once printed)."""
    plan = make_plan(cfg)
    if not cfg.run.dry_run:
        refuse_unfit(plan)
    return plan


def refuse_after_plan(cfg: Config, ctx: CheckContext, plan: Plan) -> None:
    """What a dry run refuses after its plan: a plan that does not fit, then no model.path."""
    refuse_unfit(plan)
    check_model_path(cfg, ctx)


# hydra/launcher option -> (executable on PATH or importable module it needs, what to do).
SLURM_CLIENT = "install SLURM's client tools (Debian: apt-get install slurm-client) on a host " \
    "of the cluster"
LAUNCHER_NEEDS = {
    "rlexp_slurm": ("sbatch", f"{SLURM_CLIENT}, or use hydra/launcher=rlexp_local"),
    "submitit_slurm": ("sbatch", SLURM_CLIENT),
    "ray": ("hydra_plugins.hydra_ray_launcher", "use hydra/launcher=rlexp_ray (pip install "
            "'rlexp[ray]'): hydra-ray-launcher pins cloudpickle<3, which joblib refuses"),
    "rlexp_ray": ("ray", "pip install 'rlexp[ray]' and start a cluster: ray start --head")}


def check_tracker(cfg: Config, ctx: CheckContext) -> None:
    """tracker.uri names a store MLflow can log to: one down spools, an impossible one fails."""
    if cfg.tracker.name != "mlflow":
        return
    if not cfg.tracker.experiment.strip():
        raise UserError("tracker.experiment='' is invalid: give the MLflow experiment a name "
                        "(default: rlexp)")
    if cfg.tracker.uri is not None:
        key, uri = "tracker.uri", cfg.tracker.uri
    elif os.environ.get("MLFLOW_TRACKING_URI"):
        key, uri = "MLFLOW_TRACKING_URI", os.environ["MLFLOW_TRACKING_URI"]
    else:
        return  # the default store (outputs/mlflow.db, made when used)
    check_scheme(key, uri)
    if cfg.run.dry_run:  # no probe: it needs no store, and is often made off the cluster
        return
    # A wrong store is refused, not a run that spools everything and exits 0.
    state = classify(resolve_uri(uri))
    if is_wrong(state) and ctx.jobs_run_elsewhere:
        # The jobs' own network may reach it (a cluster-internal name): said once, not refused.
        ctx.warn(f"{key}={redact_uri(uri)} is not usable from this machine "
                 f"({state.split(': ', 1)[1]}); the jobs run elsewhere and use it from there")
    elif is_wrong(state):
        raise UserError(f"{key}={redact_uri(uri)} is not a usable MLflow store: "
                        f"{state.split(': ', 1)[1]}; fix it or run with tracker=none")


# sbatch(1), --signal: "the signal may be sent up to 60 seconds earlier than specified".
SLURM_SIGNAL_EARLY_S = 60


def check_slurm_time(cfg: Config, ctx: CheckContext) -> None:
    """A SLURM job's time limit outlasts submitit's warning signal (--signal=USR2@<signal_delay_s>,
    which SLURM may send 60 s early): a limit within it can be signalled as the job starts, and
    submitit takes a signal before the limit for a preemption and requeues the job, again at each
    start. Measured with USR2@90 on a one-node SLURM 22.05: --time=2 signalled at 17 s, and once
    at the job's start (that job ended FAILED); --time=3 at 87 s; --time=4 not in 110 s."""
    if ctx.slurm is None:
        return
    launcher_min, delay_s = ctx.slurm
    key, minutes = (("hydra.launcher.timeout_min", launcher_min) if launcher_min is not None
                    else ("hardware.timeout_min", cfg.hardware.timeout_min))
    earliest = delay_s + SLURM_SIGNAL_EARLY_S
    if minutes * 60 <= earliest:
        raise UserError(f"{key}={minutes} is too short for SLURM: submitit's warning signal "
                        f"(hydra.launcher.signal_delay_s={delay_s} s before the limit, which "
                        f"SLURM may send {SLURM_SIGNAL_EARLY_S} s earlier) could reach the job "
                        f"as it starts and requeue it; set {key} >= {earliest // 60 + 1} or a "
                        f"smaller hydra.launcher.signal_delay_s")


def check_rollout(cfg: Config, ctx: CheckContext) -> None:
    """The rollout backend's own pre-flight (RolloutSpec.check)."""
    if not ctx.jobs_run_elsewhere:
        rollout_spec(cfg).check(cfg)


def check_cache_dir(cfg: Config, ctx: CheckContext) -> None:
    path = Path(cfg.run.cache_dir).expanduser()
    if "://" in cfg.run.cache_dir:
        return  # a bucket: checked by its filesystem when used
    if path.exists() and not path.is_dir():
        raise UserError(f"run.cache_dir={cfg.run.cache_dir} is a file, not a directory; point "
                        "it at a directory (default: outputs/cache)")
    probe = nearest_existing(path)
    if not probe.is_dir() or not os.access(probe, os.W_OK | os.X_OK):
        raise UserError(f"run.cache_dir={cfg.run.cache_dir}: cannot write under {probe}")


def check_dataset_text(cfg: Config, ctx: CheckContext) -> None:
    """A jsonl/json/csv dataset.path must be text (a binary file fails deep in the loader)."""
    path = Path(cfg.dataset.path).expanduser() if cfg.dataset.path else None
    if path is None or not path.is_file() or path.suffix.lower() in (".parquet", ".arrow"):
        return
    with open(path, "rb") as handle:
        head = handle.read(1 << 16)
    try:
        if b"\0" in head:
            raise UnicodeDecodeError("utf-8", head, 0, 1, "NUL byte")
        head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if exc.reason.startswith("unexpected end") and len(head) == 1 << 16:
            return  # a multi-byte character cut at the end of the sample
        raise UserError(f"dataset.path={cfg.dataset.path} is not a UTF-8 text file (jsonl, "
                        "json or csv) nor .parquet; valid formats are jsonl, json, csv, "
                        "parquet") from None


def check_dataset_rows(cfg: Config, ctx: CheckContext) -> None:
    """A local dataset file parses: the reader's own error as one line."""
    path = dataset_file(cfg.dataset)
    if path is None:
        return
    _, bad = read_rows(path)
    if bad:  # skipped, as a few torn lines of a large export should be; named here, once
        ctx.warn(f"dataset.path={path}: {len(bad)} line(s) are not valid JSON and are skipped "
                 f"(first: {bad[0]})")


def check_chat_template(cfg: Config, ctx: CheckContext) -> None:
    """model.chat_template=true needs a tokenizer that has one."""
    m = cfg.model
    if not m.chat_template:
        return
    if m.tokenizer != "hf":
        raise UserError(f"model.chat_template=true but model.tokenizer={m.tokenizer} has no chat "
                        "template; set model.chat_template=false or use tokenizer=hf")
    path = Path(m.path).expanduser() if m.path else None
    if path is None or not path.is_dir():
        return  # a hub id or bucket: the template is checked when the files are fetched
    model_dir(m)  # a dir without config.json or weights: that is the message, not the template
    if (path / "chat_template.jinja").is_file() or (path / "chat_template.json").is_file():
        return
    try:
        has = bool(json.loads((path / "tokenizer_config.json").read_text()).get("chat_template"))
    except (OSError, ValueError, AttributeError):
        has = False
    if not has:
        raise UserError(f"model.chat_template=true but {m.path} has no chat template "
                        "(tokenizer_config.json 'chat_template' or chat_template.jinja); set "
                        "model.chat_template=false for a base model")


def check_free_space(cfg: Config, ctx: CheckContext) -> None:
    """The run dir's and run.cache_dir's disks each have room for two of its checkpoints."""
    one = checkpoint_bytes(cfg)
    places: list[tuple[str, Path]] = []
    root = cfg.run.output_uri
    if root is None:
        places.append(("hydra.run.dir", ctx.output_dir))
    elif root.startswith("file://"):  # a shared mount
        places.append(("run.output_uri", Path(root[len("file://"):])))
    else:  # gs:// and the like: the run runs elsewhere (xpk's pods), with their own disks
        return
    if "://" not in cfg.run.cache_dir:
        places.append(("run.cache_dir", Path(cfg.run.cache_dir).expanduser()))
    seen: set[int] = set()
    for key, path in places:
        probe = nearest_existing(path)
        try:
            free, device = shutil.disk_usage(probe).free, os.stat(probe).st_dev
        except OSError:
            continue  # unreadable: check_writable and check_cache_dir speak for it
        if device in seen:
            continue
        seen.add(device)
        if free < 2 * one:
            raise UserError(f"{key}={path}: {human_bytes(free)} free on the disk of {probe}, "
                            f"but a checkpoint of model={cfg.model.name} takes "
                            f"~{human_bytes(one)} and a run needs room for two "
                            f"({human_bytes(2 * one)}); free some space or point {key} at "
                            "another disk")


@dataclass(frozen=True)
class Check:
    name: str  # named in tests and README.md's rule table
    # Raises UserError (one line) when the job cannot work; check_fits returns the plan.
    fn: Callable[[Config, CheckContext], Optional[Plan]]
    dry_run: bool = True  # whether a dry run applies it too


# In order: the first refusal is the one reported.
CHECKS: tuple[Check, ...] = (
    Check("tracker", check_tracker),
    Check("slurm_time", check_slurm_time),
    Check("rollout", check_rollout, dry_run=False),  # a plan needs no vLLM
    Check("cache_dir", check_cache_dir),
    Check("dataset_text", check_dataset_text),
    Check("dataset_rows", check_dataset_rows, dry_run=False),  # a plan reads no data
    Check("chat_template", check_chat_template),
    Check("plugins", check_plugins),  # user code: a dry run reports a bad _target_ too
    Check("model_files", check_model_files),
    Check("model_path", check_model_path, dry_run=False),  # a dry run: refuse_after_plan
    Check("inputs", check_inputs, dry_run=False),
    Check("fits", check_fits),  # a dry run: the plan, refused in refuse_after_plan
    Check("free_space", check_free_space, dry_run=False),  # a dry run writes no checkpoint
)


def check_job(cfg: Config, ctx: CheckContext) -> Optional[Plan]:
    """The CHECKS that apply to this job, in order, then the warnings; the plan made."""
    plan = None
    for check in CHECKS:
        if check.dry_run or not cfg.run.dry_run:
            out = check.fn(cfg, ctx)
            plan = out if out is not None else plan
    warn_completion_length(cfg, ctx)
    return plan


def warn_completion_length(cfg: Config, ctx: CheckContext) -> None:
    """rollout.max_completion_length shorter than the template's shortest correct answer: the
    run would train at reward 0 (a warning: a user's reward may not need the tags)."""
    text = shortest_answer(cfg.dataset.template, cfg.dataset.reasoning_tag)
    need, how = answer_tokens(text, cfg.model)
    limit = cfg.rollout.max_completion_length
    if limit < need:
        ctx.warn(f"rollout.max_completion_length={limit} cannot hold the shortest correct "
                 f"answer of dataset.template={cfg.dataset.template}, {text!r} ({how}): every "
                 f"completion is cut before it, so reward and accuracy stay 0; set "
                 f"rollout.max_completion_length >= {need}")


def answer_tokens(text: str, model: Any) -> tuple[int, str]:
    """(tokens of `text`, how they were counted): exact for the char tokenizer and a local
    tokenizer.json (~50 ms); else a lower bound, one token per tag and one for the answer."""
    if model.tokenizer == "char":
        return len(text), f"{len(text)} tokens with model.tokenizer=char"
    path = Path(str(model.path)).expanduser() / "tokenizer.json" if model.path else None
    if path is not None and path.is_file():
        with contextlib.suppress(Exception):  # an unreadable tokenizer: the estimate below
            from tokenizers import Tokenizer

            n = len(Tokenizer.from_file(str(path)).encode(text, add_special_tokens=False).ids)
            return n, f"{n} tokens with {path}"
    n = text.count("<") + 1
    return n, f"at least {n} tokens"


def launcher_choice(base: Any) -> Any:
    """The sweep's hydra/launcher option (joblib, rlexp_slurm, ...), None if the config has none."""
    return (OmegaConf.select(base, "hydra.runtime.choices", default=None) or {}).get("hydra/launcher")


def check_launcher(base: Any) -> None:
    """hydra.launcher's prerequisites, before the sweep callback opens an MLflow parent run."""
    choice = launcher_choice(base)
    n_jobs = OmegaConf.select(base, "hydra.launcher.n_jobs", default=None)
    if isinstance(n_jobs, int) and (n_jobs == 0 or n_jobs < -1):
        raise UserError(f"hydra.launcher.n_jobs={n_jobs} is invalid: must be >= 1 "
                        "(or -1 = one job per CPU)")
    if choice == "xpk":
        xpk = shlex.split(str(OmegaConf.select(base, "hydra.launcher.xpk", default="xpk")))
        if xpk and shutil.which(xpk[0]) is None:
            raise UserError(f"hydra/launcher=xpk needs the xpk CLI ({xpk[0]} not on PATH): "
                            "pip install xpk in its own venv and set RLEXP_XPK_BIN to it")
        launcher = OmegaConf.select(base, "hydra.launcher")
        launcher_secrets(launcher.get("secrets") or [], launcher.get("secrets_if_set") or [],
                         os.environ, launcher.get("env") or {})
        if not launcher.dry_run and not launcher.docker_image and not (
                launcher.base_docker_image and launcher.script_dir):
            # xpk's default python:3.10 has neither rlexp nor JAX: it dies at `python -m rlexp`.
            raise UserError("hydra.launcher.docker_image (or $RLEXP_DOCKER_IMAGE) is required: an "
                            "image with rlexp installed (docker build -f docker/tpu.Dockerfile "
                            "-t IMAGE .); or set both hydra.launcher.base_docker_image and "
                            "script_dir to let xpk build one")
    if str(choice) not in LAUNCHER_NEEDS:
        return
    what, fix = LAUNCHER_NEEDS[str(choice)]
    found = importlib.util.find_spec(what) if "." in what else shutil.which(what)
    if not found:
        raise UserError(f"hydra/launcher={choice} needs {what}, which is not "
                        f"{'installed' if '.' in what else 'on PATH'}: {fix}")


# The command's own checks (check_<name>), in order; the last two only for a multirun.
COMMAND_CHECKS = ("writable", "launcher", "sweep_store")


def check_command(output_dir: Path, base: Any, multirun: bool) -> CheckContext:
    """COMMAND_CHECKS for a command whose composed config (with hydra/*) is `base`."""
    check_writable(output_dir)
    if multirun:
        check_launcher(base)
        check_sweep_store(base)  # jobs on other machines reach the store
    return CheckContext(output_dir=Path(output_dir),
                        jobs_run_elsewhere=multirun and jobs_run_elsewhere(base),
                        slurm=slurm_limits(base) if multirun else None)


# Launchers that submit to SLURM through submitit (sbatch --signal=USR2@signal_delay_s).
SLURM_LAUNCHERS = ("rlexp_slurm", "submitit_slurm")


def slurm_limits(base: Any) -> Optional[tuple[Optional[int], int]]:
    """CheckContext.slurm of a sweep whose launcher is `base`'s hydra.launcher."""
    if launcher_choice(base) not in SLURM_LAUNCHERS:
        return None
    launcher = OmegaConf.select(base, "hydra.launcher")
    return launcher.get("timeout_min"), int(launcher.get("signal_delay_s") or 0)


# Launchers whose jobs run on other machines: GKE pods, SLURM's compute nodes.
REMOTE_LAUNCHERS = ("xpk", *SLURM_LAUNCHERS)


def jobs_run_elsewhere(base: Any) -> bool:
    """A sweep's jobs run on other hosts: xpk and SLURM launchers, Ray on another machine."""
    launcher = launcher_choice(base)
    if launcher in REMOTE_LAUNCHERS:
        return True
    if launcher != "rlexp_ray":
        return False
    address = str(OmegaConf.select(base, "hydra.launcher.address", default="auto") or "auto")
    host = address.removeprefix("ray://").rsplit(":", 1)[0]
    return host not in ("auto", "local", "localhost", "127.0.0.1", "")
