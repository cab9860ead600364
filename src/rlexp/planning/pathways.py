"""Pathways single-controller: one process drives every TPU of a multi-host slice.

On a Pathways slice (`xpk workload create-pathways`) the job's container is the head: it runs
no TPU itself and reaches the slice's chips through the IFRT proxy that Pathways' sidecar
serves on the same pod. MaxText's RL trainer runs this way (src/maxtext/configs/post_train/
rl.yml: `use_pathways: True`, `skip_jax_distributed_system: True`; src/maxtext/trainers/
post_train/rl/train_rl.py calls `pathwaysutils.initialize()`), and its xpk command line sets
`JAX_PLATFORMS=proxy JAX_BACKEND_TARGET=grpc://127.0.0.1:29000 ENABLE_PATHWAYS_PERSISTENCE=1`.

rlexp does the same in two steps, both reached through rlexp.planning.hardware:

1. `proxy_env` (pure) is what `setup_platform` puts in the environment before JAX is
   imported: JAX reads JAX_PLATFORMS and JAX_BACKEND_TARGET once, at import.
2. `initialize` runs when the engine first asks for devices (`init_distributed`), before any
   backend exists: it imports pathwaysutils (the optional `rlexp[pathways]` extra) and calls
   `pathwaysutils.initialize()`, which registers the "proxy" backend factory (JAX itself has
   none) and orbax's Pathways array handler for checkpoints. `jax.distributed` is never
   initialized: there is one controller, so there is nothing to join.

The proxy's devices are the slice's TPUs: `device_ok` lets the device check take them.
Nothing here imports JAX at module level (plans and dry runs start no backend).
"""

from __future__ import annotations

import logging
import os
from typing import Mapping

from rlexp.base.errors import UserError
from rlexp.config.schema import HardwareConfig

log = logging.getLogger("rlexp")

# hardware.runtime's value for this mode (the others: single, multi_controller).
RUNTIME = "pathways"
# The JAX platform of the IFRT proxy client (registered by pathwaysutils.initialize()).
PROXY_PLATFORM = "proxy"
# Where the Pathways proxy listens on the head pod (xpk create-pathways starts it beside the
# job's container); a JAX_BACKEND_TARGET already in the environment wins.
DEFAULT_BACKEND_TARGET = "grpc://127.0.0.1:29000"
# The optional dependency that provides pathwaysutils (pyproject.toml).
EXTRA = "rlexp[pathways]"


def uses_pathways(hw: HardwareConfig) -> bool:
    """True when `hw` runs as one Pathways controller (never when emulated: emulation is one
    CPU process with virtual devices)."""
    return hw.runtime == RUNTIME and not hw.emulate


def proxy_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The variables a Pathways head needs before JAX is imported (pure: the changes only).

    JAX_PLATFORMS=proxy always; JAX_BACKEND_TARGET and ENABLE_PATHWAYS_PERSISTENCE (orbax
    writes checkpoints through Pathways: pathwaysutils/_initialize.py) keep a value the user
    or the workload already set.
    """
    changes = {"JAX_PLATFORMS": PROXY_PLATFORM}
    if not environ.get("JAX_BACKEND_TARGET"):
        changes["JAX_BACKEND_TARGET"] = DEFAULT_BACKEND_TARGET
    if not environ.get("ENABLE_PATHWAYS_PERSISTENCE"):
        changes["ENABLE_PATHWAYS_PERSISTENCE"] = "1"
    return changes


def command_prefix() -> str:
    """`JAX_PLATFORMS=proxy JAX_BACKEND_TARGET=... ENABLE_PATHWAYS_PERSISTENCE=1`: what a
    create-pathways workload's command starts with, as MaxText's tutorial writes it."""
    return " ".join(f"{k}={v}" for k, v in proxy_env({}).items())


def device_ok(hw: HardwareConfig, platform: str) -> bool:
    """The proxy's devices are the slice's TPUs; depending on the jaxlib they report their
    platform as the remote one (tpu) or as the proxy's own name."""
    return uses_pathways(hw) and platform in (hw.platform, PROXY_PLATFORM)


def initialize() -> None:
    """Register the proxy backend (pathwaysutils.initialize()) before JAX starts one.

    UserError (one line) when the extra is missing or a backend already started (the proxy
    could then no longer be the one JAX uses). Idempotent: pathwaysutils ignores a second call.
    """
    try:
        import pathwaysutils
    except ImportError:
        raise UserError(f"hardware.runtime={RUNTIME} needs pathwaysutils: pip install "
                        f"'{EXTRA}' in the image the Pathways head runs") from None
    import jax
    from jax._src import xla_bridge  # private, but the only way to ask without starting one

    if xla_bridge._backends and PROXY_PLATFORM not in xla_bridge._backends:
        raise UserError(f"hardware.runtime={RUNTIME}: JAX already started its "
                        f"{'/'.join(xla_bridge._backends)} backend; start rlexp with "
                        "`python -m rlexp` so the proxy is set up before JAX")
    if jax.config.jax_platforms != PROXY_PLATFORM:
        # JAX was imported before setup_platform set JAX_PLATFORMS (a forked sweep worker).
        jax.config.update("jax_platforms", PROXY_PLATFORM)
    if not jax.config.read("jax_backend_target"):  # read from the environment at import
        jax.config.update("jax_backend_target",
                          os.environ.get("JAX_BACKEND_TARGET") or DEFAULT_BACKEND_TARGET)
    absl = logging.getLogger("absl")
    level = absl.level
    # Its orbax handler for jax.Array replaces the default on purpose (override=True), and
    # orbax warns about that replacement through absl.
    absl.setLevel(logging.ERROR)
    try:
        pathwaysutils.initialize()
    finally:
        absl.setLevel(level)
    target = jax.config.read("jax_backend_target")
    try:
        jax.devices()  # connects to the proxy: the first place an unreachable one shows
    except RuntimeError as exc:
        detail = str(exc).split(" (set JAX_PLATFORMS")[0].splitlines()[0][:300]
        raise UserError(f"hardware.runtime={RUNTIME}: no Pathways proxy answers at {target} "
                        f"({detail}); run on the head of an `xpk workload create-pathways` "
                        "workload, or set JAX_BACKEND_TARGET to the proxy's address") from None
    log.info("Pathways: proxy backend at %s", target)
