"""Pure helpers of the XPK launcher (workload names, override rendering, xpk argv): no Hydra
launch machinery and no subprocesses, so they are testable alone and cheap to import."""

# No `from __future__ import annotations`: see config.py.
import hashlib
import re
import shlex
from dataclasses import dataclass
from typing import Any, Mapping, Optional, Sequence

# xpk's own validator (xpk/parser/validators.py: name_type): a DNS-1035-like label of at most
# 40 characters. A name outside it makes `xpk workload create` exit 2 before doing anything.
_WORKLOAD_RE = re.compile(r"[a-z]([-a-z0-9]*[a-z0-9])?")
MAX_WORKLOAD_NAME = 40

# Overrides that only steer Hydra in the launching process: the pod runs ONE job, so the
# sweep declaration, the launcher and the multirun mode must not travel with it.
_LAUNCH_ONLY = ("hydra.", "hydra/", "+hydra", "~hydra", "+sweep=", "sweep=", "~sweep")

# A string the override grammar reads back unchanged without quotes.
_PLAIN = re.compile(r"[A-Za-z_/][A-Za-z0-9_./:-]*")
_RESERVED = {"true", "false", "null", "none", "nan", "inf"}


@dataclass(frozen=True)
class Workload:
    """One sweep job as an xpk workload."""

    name: str  # workload name as xpk and Kubernetes see it (<= 40 chars, [a-z0-9-])
    subcommand: str  # `create` (a process per host) or `create-pathways` (runtime=pathways)
    tpu_type: str  # TPU type, e.g. v6e-8 (from the job's hardware.accelerator_type)
    command: str  # the shell command the container runs: `python -m rlexp <overrides>`
    argv: tuple[str, ...]
    job_num: int  # the sweep's job: number, overrides, subdir (its deterministic name)
    overrides: list[str]
    job_subdir: str


def is_launch_only(override: str) -> bool:
    return override.strip().startswith(_LAUNCH_ONLY)


def workload_name(prefix: str, sweep_id: str, job_num: int, overrides: Sequence[str]) -> str:
    """Deterministic: the same sweep command and job give the same name (xpk refuses an existing
    one: no duplicate run); the digest parts sweeps sharing a prefix, the job number reads well."""
    ident = "\n".join([sweep_id, *sorted(o for o in overrides if not is_launch_only(o))])
    digest = hashlib.sha1(ident.encode()).hexdigest()[:8]
    head = re.sub(r"[^a-z0-9-]+", "-", prefix.lower()).strip("-") or "rlexp"
    if not head[0].isalpha():
        head = "r" + head
    tail = f"-{job_num}-{digest}"
    name = head[: MAX_WORKLOAD_NAME - len(tail)].rstrip("-") + tail
    assert _WORKLOAD_RE.fullmatch(name) and len(name) <= MAX_WORKLOAD_NAME, name
    return name


def format_value(value: Any) -> str:
    """A Python value as Hydra's override grammar writes it (round-trips through the parser)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    if isinstance(value, (list, tuple)):
        return "[" + ",".join(format_value(v) for v in value) + "]"
    if isinstance(value, Mapping):
        return "{" + ",".join(f"{k}:{format_value(v)}" for k, v in value.items()) + "}"
    text = str(value)
    if _PLAIN.fullmatch(text) and text.lower() not in _RESERVED:
        return text
    return "'" + text.replace("\\", "\\\\").replace("'", "\\'") + "'"


def flatten(node: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in node.items():
        if isinstance(value, Mapping) and value:
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def resolved_overrides(
    job_overrides: Sequence[str], job_cfg: Mapping[str, Any], plain_cfg: Mapping[str, Any]
) -> list[str]:
    """The overrides that reproduce this job's config in a single run on the pod. job_cfg: the
    job's resolved config (without `hydra`); plain_cfg: composed from the job's overrides less
    launch-only ones (`+sweep=NAME`). Both apply the kept overrides last, so what a sweep file sets
    besides sweeper params (algo.num_iterations=2) is their difference, made an explicit override:
    the pod needs no sweep file and no MULTIRUN mode."""
    kept = [o for o in job_overrides if not is_launch_only(o)]
    job_flat, plain_flat = flatten(job_cfg), flatten(plain_cfg)
    return kept + [f"{'' if key in plain_flat else '+'}{key}={format_value(job_flat[key])}"
                   for key in sorted(job_flat)
                   if key not in plain_flat or job_flat[key] != plain_flat[key]]


def build_argv(p: Mapping[str, Any], *, name: str, tpu_type: str, pathways: bool, command: str,
               project: Optional[str], zone: Optional[str], priority: str,
               env: Mapping[str, str], dry_run: bool, env_file: Optional[str] = None
               ) -> tuple[str, ...]:
    """The xpk call of one workload; `p` holds the launcher's settings (XpkLauncherConf)."""
    argv = [*shlex.split(str(p["xpk"])), "workload", "create-pathways" if pathways else "create",
            "--workload", name, "--cluster", p["cluster"], "--tpu-type", tpu_type,
            "--num-slices", str(p["num_slices"]), "--priority", priority,
            "--max-restarts", str(p["max_restarts"]), "--command", command]
    # xpk asks `gcloud config get` for a missing project/zone (and crashes in --dry-run with
    # no zone: zone_to_region(None)), so pass them whenever we know them.
    if project:
        argv += ["--project", project]
    if zone:
        argv += ["--zone", zone]
    if p["docker_image"]:
        argv += ["--docker-image", p["docker_image"]]
    else:  # xpk builds an image: base image + the script dir (the checkout) copied in
        if p["base_docker_image"]:
            argv += ["--base-docker-image", p["base_docker_image"]]
        if p["script_dir"]:
            argv += ["--script-dir", p["script_dir"]]
    if env_file:  # xpk takes --env or --env-file, not both: the file holds `env` too
        argv += ["--env-file", env_file]
    else:
        for key, value in env.items():
            argv += ["--env", f"{key}={value}"]
    argv += list(p["extra_args"] or [])
    if dry_run:
        argv.append("--dry-run")
    return tuple(argv)


def shell_command(program: str, overrides: Sequence[str]) -> str:
    """`python -m rlexp a=1 'b=x y'`: xpk runs --command through `bash -c` in the container."""
    return " ".join([program, *(shlex.quote(o) for o in overrides)])


# xpk 1.16's `workload create --priority` choices (xpk/parser/workload.py), lowest first.
PRIORITIES = ("very-low", "low", "medium", "high", "very-high")
DEFAULT_PRIORITY = "medium"  # what xpk uses when --priority is not given


def workload_priority(launcher: Optional[str], recipe: Optional[str]) -> str:
    """--priority: hydra.launcher.priority, else the job's run.priority (MaxText's Pathways
    tutorial uses high), else xpk's default. A value xpk would refuse: ValueError naming the key."""
    for key, value in (("hydra.launcher.priority", launcher), ("run.priority", recipe)):
        if value is None:
            continue
        if str(value) not in PRIORITIES:
            raise ValueError(f"{key}={value!r} is not an xpk priority; valid choices are: "
                             f"{', '.join(PRIORITIES)}")
        return str(value)
    return DEFAULT_PRIORITY


def env_file_text(env: Mapping[str, str], secrets: Sequence[str]) -> str:
    """xpk's --env-file: `NAME=value` per variable of `env`, then each secret's bare NAME, filled
    by xpk from its environment (never on a command line). A multi-line value: ValueError."""
    lines = []
    for key, value in env.items():
        if "\n" in str(value) or "\r" in str(value):
            raise ValueError(f"hydra.launcher.env: {key}'s value spans several lines, which "
                             "xpk's --env-file cannot hold")
        lines.append(f"{key}={value}")
    return "\n".join([*lines, *secrets]) + "\n"


def shown_env(env: Mapping[str, str], secrets: Sequence[str]) -> str:
    """The env file as the dry run prints it: `A=1 HF_TOKEN=***` (callers redact `env`)."""
    return " ".join([*(f"{k}={v}" for k, v in env.items()), *(f"{n}=***" for n in secrets)])
