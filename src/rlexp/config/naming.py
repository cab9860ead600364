"""Run and sweep names, and the deterministic dirs built from them.

A run dir is a function of the command's overrides, so running the same command again finds
the same dir (and resumes it); a sweep dir is a function of the sweep command, and each job's
subdir a function of the job's own overrides (so a rerun skips finished jobs).
"""

from __future__ import annotations

import dataclasses

import hashlib
import re
from collections.abc import Iterable, Mapping
from typing import Any

from omegaconf import OmegaConf

from rlexp.base.redact import is_secret_key

# Overrides that do not change what a run computes, so they do not change its identity.
NEUTRAL_PREFIXES = ("hydra.", "hydra/", "run.", "+run.", "~run.", "tracker.", "+tracker.",
                    "+sweep", "sweep=")
# run.* keys that do change what a run computes: a fork is a new run, never its origin's dir.
IDENTITY_RUN_KEYS = ("run.init_from=",)
# Groups whose choice is part of every run name, in this order.
NAMED_GROUPS = ("algo", "model", "dataset", "hardware")
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
MAX_NAME = 80


def identity_overrides(overrides: Iterable[str]) -> list[str]:
    """The overrides that define a run, normalized (sorted, neutral ones dropped)."""
    kept = [o.strip() for o in overrides if not o.strip().startswith(NEUTRAL_PREFIXES)
            or o.strip().lstrip("+").startswith(IDENTITY_RUN_KEYS)]
    return sorted(kept)


def _short(override: str) -> str:
    key, _, value = override.lstrip("+~").partition("=")
    if "/" in key or key in NAMED_GROUPS:  # a group choice: already in the name
        return ""
    if is_secret_key(key):  # never in a dir name (the digest still tells runs apart)
        return ""
    if key == "run.init_from":  # a path or run id: the digest tells origins apart
        return "fork"
    return f"{key.rsplit('.', 1)[-1]}{value}"


def _digest(items: list[str]) -> str:
    return hashlib.sha1("\n".join(items).encode()).hexdigest()[:6]


def run_name(choices: Mapping[str, str], overrides: Iterable[str]) -> str:
    """Readable and unique: 'gspo-tiny-arithmetic-cpu-beta0.04_1a2b3c'."""
    ident = identity_overrides(overrides)
    parts = [str(choices.get(g, "")) for g in NAMED_GROUPS if choices.get(g)]
    parts += [s for s in (_short(o) for o in ident) if s]
    name = _UNSAFE.sub("_", "-".join(parts))[:MAX_NAME].strip("-_")
    return f"{name}_{_digest(ident)}" if ident else name


def sweep_name(overrides: Iterable[str]) -> str:
    """'beta0,0.04-steps2_9f8e7d' for `-m algo.beta=0,0.04 train.steps=2`."""
    ident = identity_overrides(overrides)
    sweep_files = [o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith("sweep=")]
    parts = [f"sweep-{s}" for s in sweep_files] + [s for s in (_short(o) for o in ident) if s]
    name = _UNSAFE.sub("_", "-".join(parts))[:MAX_NAME].strip("-_") or "sweep"
    return f"{name}_{_digest(ident + sweep_files)}"


def _plain(node) -> object:
    return OmegaConf.to_container(node) if OmegaConf.is_config(node) else node


def register_resolvers() -> None:
    """`${rlexp_run_name:...}` and `${rlexp_sweep_name:...}`, used by conf/config.yaml."""
    if not OmegaConf.has_resolver("rlexp_run_name"):
        OmegaConf.register_new_resolver(
            "rlexp_run_name", lambda choices, task: run_name(_plain(choices), _plain(task)))
    if not OmegaConf.has_resolver("rlexp_sweep_name"):
        # Cached: Hydra copies the parent's resolved value into each job (as for ${now:}),
        # so every job sees the sweep dir of the whole command, not one of its own.
        OmegaConf.register_new_resolver(
            "rlexp_sweep_name", lambda task: sweep_name(_plain(task)), use_cache=True)


def flatten(obj: Any, prefix: str = "") -> dict[str, Any]:
    """Config dataclass -> {"algo.beta": 0.04, ...}."""
    out: dict[str, Any] = {}
    items = dataclasses.asdict(obj).items() if dataclasses.is_dataclass(obj) else obj.items()
    for key, value in items:
        if isinstance(value, dict):
            out.update(flatten(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out
