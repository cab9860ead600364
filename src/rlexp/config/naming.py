"""Run and sweep names, the deterministic dirs built from them, and the one label formatter
(`label`, 'gspo β=0.04 G=4': run names, legends, job labels, the report's table). A run dir is
a function of the command's overrides, so the same command finds (and resumes) the same dir."""

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
NAMED_GROUPS = ("algo", "model", "dataset", "hardware")  # in every run name, in this order
_UNSAFE = re.compile(r"[^A-Za-z0-9._+-]+")
MAX_NAME = 80


def identity_overrides(overrides: Iterable[str]) -> list[str]:
    """The overrides that define a run, normalized (sorted, neutral ones dropped)."""
    return sorted(o.strip() for o in overrides if not o.strip().startswith(NEUTRAL_PREFIXES)
                  or o.strip().lstrip("+").startswith(IDENTITY_RUN_KEYS))


def _short(override: str) -> str:
    key, _, value = override.lstrip("+~").partition("=")
    # A group choice is already in the name; a secret never goes in a dir name (the digest
    # still tells runs apart).
    if "/" in key or key in NAMED_GROUPS or is_secret_key(key):
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


# Swept keys as the GRPO/GSPO papers write them; other keys go by their last part.
ABBREVIATIONS = {"beta": "β", "epsilon": "ε", "epsilon_high": "ε_high",
                 "num_generations": "G", "num_iterations": "μ", "learning_rate": "lr",
                 "batch_size": "B", "mini_batch_size": "mini_B", "temperature": "T",
                 "max_completion_length": "max_len", "kl_estimator": "kl"}


def is_choice(key: str) -> bool:
    """A config group choice ('algo', 'model/family'): shown by its value alone."""
    key = key.lstrip("+~")
    return "." not in key and ("/" in key or key in NAMED_GROUPS or key.isidentifier())


def short_value(value: Any) -> str:
    """'0.012345678' -> '0.01235' (Optuna's sampled floats), '0.0' -> '0'; else as typed."""
    text = str(value).strip("'\"")
    if text.lstrip("+-").isdigit():
        return text
    try:
        return f"{float(text):.4g}"
    except ValueError:
        return text


def short_key(key: str, keys: Iterable[str] = ()) -> str:
    """'algo.beta' -> 'β'; a leaf two of `keys` share keeps as much of its path as tells them
    apart ('train.seed' next to 'dataset.seed')."""
    key = key.lstrip("+~")
    others = [k.lstrip("+~") for k in keys if k.lstrip("+~") != key]
    parts = key.split(".")
    for n in range(1, len(parts) + 1):
        suffix = ".".join(parts[-n:])
        if not any(o == suffix or o.endswith("." + suffix) for o in others):
            break
    return ABBREVIATIONS.get(suffix, suffix) if n == 1 else suffix


def label_item(key: str, value: Any, keys: Iterable[str] = ()) -> str:
    """'algo.beta', '0.04' -> 'β=0.04'; a group choice by its value ('gspo')."""
    return short_value(value) if is_choice(key) else f"{short_key(key, keys)}={short_value(value)}"


def fit(tokens: Iterable[str], max_len: int | None = None, sep: str = " ") -> str:
    """Tokens joined by `sep`, whole: past `max_len` the last ones give way to '+N'."""
    tokens = [t for t in tokens if t]
    text = sep.join(tokens)
    if max_len is None or len(text) <= max_len:
        return text
    for keep in range(len(tokens) - 1, 0, -1):
        text = f"{sep.join(tokens[:keep])}{sep}+{len(tokens) - keep}"
        if len(text) <= max_len:
            return text
    return tokens[0] if tokens else ""  # one token longer than the room: whole, never cut


def label(values: Mapping[str, Any], keys: Iterable[str], max_len: int | None = None,
          sep: str = " ") -> str:
    """'gspo β=0.04 G=4': the values of `keys` (in that order) that `values` holds."""
    keys = list(keys)
    return fit([label_item(k, values[k], keys) for k in keys if k in values], max_len, sep)


def override_values(overrides: Iterable[str]) -> dict[str, str]:
    """['algo=gspo', '+algo.beta=0.04'] -> {'algo': 'gspo', 'algo.beta': '0.04'}."""
    pairs = (str(item).lstrip("+~").partition("=") for item in overrides)
    return {key: value for key, sep, value in pairs if sep}
