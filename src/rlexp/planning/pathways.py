"""Pathways single-controller: one process drives every TPU of a multi-host slice. On a Pathways
slice (`xpk workload create-pathways`) the job's container is the head, reaching the slice's
chips through the IFRT proxy on its pod. MaxText's RL trainer runs so (src/maxtext/configs/
post_train/rl.yml `use_pathways: True`; post_train/rl/train_rl.py calls
`pathwaysutils.initialize()`). rlexp.planning.hardware does the same: `proxy_env` before JAX is
imported (it reads JAX_PLATFORMS once), then `initialize`, which registers the "proxy" backend
and orbax's Pathways array handler; jax.distributed is never initialized."""

from __future__ import annotations

import logging
import os
from typing import Mapping

from rlexp.base.errors import UserError
from rlexp.config.schema import HardwareConfig

log = logging.getLogger("rlexp")

RUNTIME = "pathways"  # hardware.runtime's value for this mode
# The JAX platform of the IFRT proxy client (registered by pathwaysutils.initialize()).
PROXY_PLATFORM = "proxy"
# Where the Pathways proxy listens on the head pod (xpk create-pathways starts it beside the
# job's container); a JAX_BACKEND_TARGET already in the environment wins.
DEFAULT_BACKEND_TARGET = "grpc://127.0.0.1:29000"


def uses_pathways(hw: HardwareConfig) -> bool:
    """True when `hw` runs as one Pathways controller (never emulated: that is one process)."""
    return hw.runtime == RUNTIME and not hw.emulate


def proxy_env(environ: Mapping[str, str]) -> dict[str, str]:
    """Variables a Pathways head needs before JAX is imported (pure): JAX_PLATFORMS=proxy;
    JAX_BACKEND_TARGET, ENABLE_PATHWAYS_PERSISTENCE (pathwaysutils/_initialize.py) unless set."""
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
    """The proxy's devices are the slice's TPUs, reporting tpu or the proxy's name (by jaxlib)."""
    return uses_pathways(hw) and platform in (hw.platform, PROXY_PLATFORM)


def initialize() -> None:
    """Register the proxy backend (pathwaysutils.initialize()) before JAX starts one; UserError
    when the extra is missing or another backend already started. Idempotent."""
    try:
        import pathwaysutils
    except ImportError:
        raise UserError(f"hardware.runtime={RUNTIME} needs pathwaysutils: pip install "
                        "'rlexp[pathways]' in the image the Pathways head runs") from None
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
