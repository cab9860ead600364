"""Secrets a launcher hands to remote jobs by name (hydra.launcher.secrets): environment
variables that reach the jobs without their values on any command line or output."""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from rlexp.base.errors import UserError
from rlexp.base.redact import is_secret_key

# A name xpk's --env-file reads (xpk/core/docker_resources.py parse_env_config, xpk 1.16).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def launcher_secrets(secrets: Iterable[Any], if_set: Iterable[Any], environ: Mapping[str, str],
                     env: Mapping[str, Any]) -> list[str]:
    """What a launcher forwards, without repeats: hydra.launcher.secrets, and those of
    secrets_if_set (HF_TOKEN by default) set here and not in the jobs' `env`. Each must be a set,
    secret-named variable (so rlexp masks its value) not also in `env`; else a UserError."""
    key = "hydra.launcher.secrets"
    optional = [n for n in if_set if str(n) in environ and str(n) not in env]
    out: list[str] = []
    for name in map(str, [*secrets, *optional]):
        if not ENV_NAME.fullmatch(name):
            raise UserError(f"{key}: {name!r} is not an environment variable name "
                            "([A-Za-z_][A-Za-z0-9_]*)")
        if not is_secret_key(name):
            raise UserError(f"{key}: {name} is not named like a secret (..._TOKEN, ..._KEY, "
                            "..._PASSWORD, ..._SECRET), so rlexp would not mask its value: "
                            "give it through hydra.launcher.env")
        if name in env:
            raise UserError(f"{key}: {name} is also in the jobs' environment "
                            "(hydra.launcher.env): name it in one of them")
        if name not in environ:
            raise UserError(f"{key}: {name} is not set in this environment: export {name}=... "
                            f"before launching, or drop it from {key}")
        if name not in out:
            out.append(name)
    return out
