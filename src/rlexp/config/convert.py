"""A composed DictConfig -> the validated `Config`, once, at the entry point. Unknown keys and
OmegaConf's errors become one line."""

from __future__ import annotations

import dataclasses
import hashlib
import os
import typing
from functools import lru_cache
from typing import Optional

from omegaconf import DictConfig, OmegaConf

from rlexp.base.errors import UserError
from rlexp.config.schema import Config
from rlexp.config.validate import validate

# The digests of the configs the launching process's pre-flight validated (before_launch): a
# job whose config is one of them is not validated again.
VETTED_ENV = "RLEXP_VETTED_CONFIGS"


def config_digest(cfg: Config) -> str:
    """A fingerprint of every field of `cfg` (its dataclass repr, nested)."""
    return hashlib.sha256(repr(cfg).encode()).hexdigest()[:16]


@lru_cache(maxsize=None)
def _sub_schema(schema: type, name: str) -> Optional[type]:
    """The dataclass of field `name` of `schema` (None for a leaf or an unknown name)."""
    hint = typing.get_type_hints(schema).get(name)
    return hint if isinstance(hint, type) and dataclasses.is_dataclass(hint) else None


def unknown_key_message(dotted: str) -> str:
    """'algo.clip is not a config key; valid keys under algo are: ...' (from the schema)."""
    schema: type = Config
    parts = dotted.split(".")
    for i, part in enumerate(parts[:-1]):
        sub = _sub_schema(schema, part)
        if sub is None:  # the unknown part is higher up the path
            dotted = ".".join(parts[: i + 1])
            break
        schema = sub
    parent = dotted.rsplit(".", 1)[0] if "." in dotted else "the top level"
    valid = sorted(f.name for f in dataclasses.fields(schema))
    return f"{dotted} is not a config key; valid keys under {parent} are: {', '.join(valid)}"


def _unknown_keys(node: dict, schema: type, prefix: str) -> list[str]:
    """Keys of `node` (the composed config, unresolved) that the schema lacks (`+algo.x=1`)."""
    names = {f.name for f in dataclasses.fields(schema)}
    bad = []
    for key, value in node.items():
        dotted = f"{prefix}{key}"
        if key not in names:
            bad.append(dotted)
            continue
        sub = _sub_schema(schema, str(key))
        if sub is not None and isinstance(value, dict):
            bad.extend(_unknown_keys(value, sub, dotted + "."))
    return bad


def to_config(cfg: DictConfig) -> Config:
    """Composed DictConfig (without its `hydra` node) -> validated `Config` dataclass."""
    plain = OmegaConf.masked_copy(cfg, [k for k in cfg.keys() if k != "hydra"]) \
        if "hydra" in cfg else cfg
    unknown = _unknown_keys(OmegaConf.to_container(plain, resolve=False), Config, "")
    if unknown:
        raise UserError(unknown_key_message(unknown[0]))
    try:
        obj = OmegaConf.to_object(plain)
    except Exception as exc:  # interpolation or type errors surfacing late
        raise UserError(one_line_omegaconf_error(exc)) from None
    return obj if config_digest(obj) in os.environ.get(VETTED_ENV, "").split() else validate(obj)


def one_line_omegaconf_error(exc: BaseException) -> str:
    """OmegaConf errors are multi-line ('full_key: ...'); keep what a user needs."""
    full_key = getattr(exc, "full_key", None)
    msg = str(getattr(exc, "msg", None) or exc).splitlines()[0].strip()
    return f"{full_key}: {msg}" if full_key else msg
