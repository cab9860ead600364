"""Secrets a launcher hands to jobs on other machines by name (hydra.launcher.secrets of the
xpk launcher): environment variables of the launching process that go to the jobs without
their values on any command line or in any output. Checked in pre-flight
(rlexp.launch.checks.check_launcher) and again by the launcher, as one line each."""

from __future__ import annotations

import re
from typing import Any, Iterable, Mapping

from rlexp.base.errors import UserError
from rlexp.base.redact import is_secret_key

# A name xpk's --env-file reads (xpk/core/docker_resources.py parse_env_config, xpk 1.16).
ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def launcher_secrets(secrets: Iterable[Any], if_set: Iterable[Any], environ: Mapping[str, str],
                     env: Mapping[str, Any]) -> list[str]:
    """What a launcher forwards, without repeats: every name of hydra.launcher.secrets, and
    those of hydra.launcher.secrets_if_set that are set here and not in the jobs' `env` (by
    default HF_TOKEN: gated weights such as Llama's need it; without it, nothing is sent).
    Each must be an environment variable name, set in `environ`, named like a secret
    (is_secret_key: HF_TOKEN, WANDB_API_KEY, ...) so that rlexp masks its value wherever it
    prints it, here and in the job, and not also in `env`; else a UserError naming it."""
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
