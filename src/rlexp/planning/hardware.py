"""Devices and meshes: the one place where the hardware profile meets JAX.

Order of calls at start-up (the entry point and the engine follow it):

1. `setup_platform(hw)`   before JAX creates its backend: picks the platform and, with
                          `hardware.emulate=true`, fakes the profile's device count on CPU.
2. `role_meshes(hw)`      when the engine builds: joins the other hosts (`hosts > 1`),
                          checks the visible devices against the profile (`check_devices`) and
                          returns one mesh per Tunix role.

Nothing here imports jax at module level: `run.dry_run=true` must not start a backend.
"""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from rlexp.base.errors import UserError
from rlexp.config.schema import HardwareConfig, MeshConfig

if TYPE_CHECKING:
    import jax

# Imported inside functions, on purpose: jax (1.4 s) is imported only where devices are read or
# meshes built: plans and dry runs need none.

MESH_AXES = ("fsdp", "tp")

# The XLA flag that makes the CPU client expose N virtual devices; read once, when JAX
# creates its CPU backend, so it has to be in the environment before that.
_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
# JAX preallocates only 75% of a GPU's memory by default (XLA_PYTHON_CLIENT_MEM_FRACTION);
# rlexp asks for 95%, leaving the rest to the CUDA context and cuDNN/cuBLAS workspaces. The
# memory plan budgets the same share.
GPU_MEMORY_FRACTION = 0.95


def usable_hbm_fraction(hw: HardwareConfig) -> float:
    """Share of hardware.hbm_gib_per_device a run can allocate (see GPU_MEMORY_FRACTION)."""
    return GPU_MEMORY_FRACTION if expected_platform(hw) == "gpu" else 1.0

# ------------------------------------------------------------------------------ platform


def expected_platform(hw: HardwareConfig) -> str:
    """The JAX platform the run will see: emulation always runs on CPU."""
    return "cpu" if hw.emulate else hw.platform


def platform_env(hw: HardwareConfig, environ: Mapping[str, str]) -> dict[str, str]:
    """Environment variables `setup_platform` sets (pure: returns the changes only).

    CPU runs (the `cpu` profile or any emulated profile) pin JAX_PLATFORMS=cpu so JAX does not
    probe for TPU/GPU plugins, and ask the CPU client for as many devices as the profile has.
    GPUs get JAX's preallocation raised to GPU_MEMORY_FRACTION unless the user set it; other
    real accelerators are left to JAX's own discovery.
    """
    if expected_platform(hw) == "gpu":
        if "XLA_PYTHON_CLIENT_MEM_FRACTION" in environ:
            return {}
        return {"XLA_PYTHON_CLIENT_MEM_FRACTION": str(GPU_MEMORY_FRACTION)}
    if expected_platform(hw) != "cpu":
        return {}
    flags = [f for f in environ.get("XLA_FLAGS", "").split() if not f.startswith(_DEVICE_COUNT_FLAG)]
    changes = {"JAX_PLATFORMS": "cpu"}
    if hw.devices > 1:
        flags.append(f"{_DEVICE_COUNT_FLAG}={hw.devices}")
    if flags or "XLA_FLAGS" in environ:
        changes["XLA_FLAGS"] = " ".join(flags)
    return changes


def _backend_started() -> bool:
    """True once JAX has created a backend (after that, XLA_FLAGS changes are ignored)."""

    if "jax" not in sys.modules:
        return False
    from jax._src import xla_bridge  # private, but the only way to ask without starting one

    return bool(xla_bridge._backends)


def setup_platform(hw: HardwareConfig) -> None:
    """Prepare the process environment for `hw`. Call before anything initializes JAX.

    Raises UserError when JAX already started a CPU backend with a different device count,
    because the emulated meshes could then not be built.
    """
    changes = platform_env(hw, os.environ)
    if changes and _backend_started():
        import jax

        found = jax.device_count()
        if expected_platform(hw) == "cpu" and found != hw.devices:
            raise UserError(
                f"hardware={hw.name} needs {hw.devices} CPU device(s) but JAX already started "
                f"with {found}; call rlexp.planning.hardware.setup_platform before JAX initializes")
        return
    os.environ.update(changes)
    if "JAX_PLATFORMS" in changes and "jax" in sys.modules:
        # JAX read JAX_PLATFORMS when it was imported (a sweep worker forked from a process
        # that imported it): the variable alone would not reach the backend it starts.
        import jax

        jax.config.update("jax_platforms", changes["JAX_PLATFORMS"])


def init_distributed(hw: HardwareConfig) -> None:
    """Join the other hosts of a multi-host slice (TPU pods, multi-node GPU). Idempotent.

    Emulation runs in one process, so it never initializes the distributed runtime.
    """
    if hw.hosts <= 1 or hw.emulate:
        return
    import jax

    if not jax.distributed.is_initialized():
        # On Cloud TPU and SLURM the coordinator, process count and id are auto-detected.
        jax.distributed.initialize()

# ------------------------------------------------------------------------------- devices


def device_mismatch(hw: HardwareConfig, platform: str, count: int, kind: str) -> str | None:
    """One line saying how the visible devices differ from the profile, or None if they fit.

    Pure (takes what JAX reports) so the message is tested without the hardware.
    """
    want_platform = expected_platform(hw)
    kind_ok = (hw.emulate or hw.device_kind is None
               or re.fullmatch(hw.device_kind, kind) is not None)
    if platform == want_platform and count == hw.devices and kind_ok:
        return None
    want = f"{hw.devices} {want_platform} device(s)"
    if not hw.emulate and hw.device_kind is not None:
        want += f" of kind '{hw.device_kind}'"
    fix = ("pick the profile of the hardware you have (e.g. hardware=cpu)" if hw.emulate else
           "use hardware.emulate=true to run its meshes on virtual CPU devices, "
           "or pick the profile of the hardware you have (e.g. hardware=cpu)")
    return (f"hardware={hw.name}{' (emulated)' if hw.emulate else ''} expects {want} but JAX "
            f"sees {count} {platform} device(s) ('{kind}'); {fix}")


def check_devices(hw: HardwareConfig, devices: Sequence["jax.Device"] | None = None) -> None:
    """Raise UserError (one line) when the visible devices do not match the profile."""
    if devices is None:
        import jax

        devices = jax.devices()
    first = devices[0]
    problem = device_mismatch(hw, first.platform, len(devices), first.device_kind)
    if problem is not None:
        raise UserError(problem)

# ---------------------------------------------------------------------------------- meshes


@dataclass(frozen=True)
class RoleDevices:
    """Which slice of the device list each role gets: [start, stop) indices."""

    trainer: tuple[int, int]
    rollout: tuple[int, int]

    @property
    def colocated(self) -> bool:
        return self.trainer == self.rollout


def role_device_ranges(hw: HardwareConfig) -> RoleDevices:
    """Device index ranges per role.

    colocated: both roles span every device. split: the trainer takes the first
    round(N * trainer_fraction) devices and the sampler the last round(N * sampler_fraction),
    as MaxText's RL trainer does with trainer_devices_fraction / sampler_devices_fraction
    (disjoint because `validate` keeps the fractions' sum <= 1).
    """
    n = hw.devices
    if hw.split == "colocated":
        return RoleDevices(trainer=(0, n), rollout=(0, n))
    n_train = int(round(n * hw.trainer_fraction))
    n_roll = int(round(n * hw.sampler_fraction))
    return RoleDevices(trainer=(0, n_train), rollout=(n - n_roll, n))


def make_mesh(mesh: MeshConfig, devices: Sequence["jax.Device"]) -> "jax.sharding.Mesh":
    """A ("fsdp", "tp") mesh over exactly `devices` (len must be fsdp * tp)."""
    import jax
    from jax.experimental import mesh_utils

    shape = (mesh.fsdp, mesh.tp)
    if len(devices) != mesh.fsdp * mesh.tp:
        raise UserError(f"mesh fsdp={mesh.fsdp} x tp={mesh.tp} needs {mesh.fsdp * mesh.tp} "
                        f"devices, got {len(devices)}")
    try:
        # Topology-aware order on TPU (tp along the fastest ICI links).
        grid = mesh_utils.create_device_mesh(shape, list(devices), allow_split_physical_axes=True)
    except (ValueError, NotImplementedError, AssertionError):
        # Sub-slices of a TPU topology (the split halves) and CPU devices have no physical
        # layout the helper knows; row-major order of the device ids is then the layout.
        grid = np.array(list(devices)).reshape(shape)
    return jax.sharding.Mesh(grid, MESH_AXES)


def role_meshes(hw: HardwareConfig,
                devices: Sequence["jax.Device"] | None = None) -> dict[str, "jax.sharding.Mesh"]:
    """Meshes per Tunix role: 'trainer' (actor + reference) and 'rollout'.

    Joins the other hosts first, checks the devices (all of jax.devices() unless `devices`
    picks some), then builds the meshes. When the roles are colocated with the same mesh shape
    the SAME Mesh object is returned for both, which lets Tunix share one copy of the policy
    weights between trainer and sampler.
    """
    import jax

    init_distributed(hw)
    devices = list(jax.devices() if devices is None else devices)
    check_devices(hw, devices)
    ranges = role_device_ranges(hw)
    trainer = make_mesh(hw.trainer_mesh, devices[slice(*ranges.trainer)])
    if ranges.colocated and hw.trainer_mesh == hw.rollout_mesh:
        return {"trainer": trainer, "rollout": trainer}
    return {"trainer": trainer,
            "rollout": make_mesh(hw.rollout_mesh, devices[slice(*ranges.rollout)])}
