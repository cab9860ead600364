"""Devices and meshes: the one place where the hardware profile meets JAX.

In this order: `setup_platform` before JAX creates its backend (hardware.emulate fakes the
devices on CPU), `init_distributed` (joins a multi_controller run's processes), `role_meshes`
when the engine builds. Nothing imports jax (1.4 s) at module level: plans start no backend."""

from __future__ import annotations

import os
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping, Sequence

import numpy as np

from rlexp.base import runtime
from rlexp.base.errors import UserError
from rlexp.base.runtime import COORDINATOR_ENV, COUNT_ENV, INDEX_ENV, Launch, detect_launch
from rlexp.config.schema import HardwareConfig, MeshConfig
from rlexp.planning import pathways

if TYPE_CHECKING:
    import jax

# The XLA flag that makes the CPU client expose N virtual devices; read once, when JAX
# creates its CPU backend, so it has to be in the environment before that.
_DEVICE_COUNT_FLAG = "--xla_force_host_platform_device_count"
# JAX preallocates 75% of a GPU by default (XLA_PYTHON_CLIENT_MEM_FRACTION); rlexp asks for 95%,
# leaving the rest to the CUDA context and cuDNN/cuBLAS workspaces (the memory plan's share too).
GPU_MEMORY_FRACTION = 0.95
# JAX's config option for cross-process CPU collectives, as its environment variable.
_CPU_COLLECTIVES_ENV = "JAX_CPU_COLLECTIVES_IMPLEMENTATION"


def usable_hbm_fraction(hw: HardwareConfig) -> float:
    """Share of hardware.hbm_gib_per_device a run can allocate (see GPU_MEMORY_FRACTION)."""
    return GPU_MEMORY_FRACTION if expected_platform(hw) == "gpu" else 1.0


def expected_platform(hw: HardwareConfig) -> str:
    """The JAX platform the run will see: emulation always runs on CPU."""
    return "cpu" if hw.emulate else hw.platform


def platform_env(hw: HardwareConfig, environ: Mapping[str, str],
                 vllm_share: float = 0.0) -> dict[str, str]:
    """`setup_platform`'s environment (pure); `vllm_share` is left out of JAX's preallocation."""
    if pathways.uses_pathways(hw):  # Pathways single-controller (planning/pathways.py)
        return pathways.proxy_env(environ)
    platform = expected_platform(hw)
    if platform == "gpu" and "XLA_PYTHON_CLIENT_MEM_FRACTION" not in environ:
        return {"XLA_PYTHON_CLIENT_MEM_FRACTION": f"{GPU_MEMORY_FRACTION - vllm_share:.4g}"}
    if platform != "cpu":
        return {}
    flags = [f for f in environ.get("XLA_FLAGS", "").split() if not f.startswith(_DEVICE_COUNT_FLAG)]
    changes = {"JAX_PLATFORMS": "cpu"}
    local = local_devices(hw)
    if local > 1:
        flags.append(f"{_DEVICE_COUNT_FLAG}={local}")
    if multi_controller(hw):
        changes[_CPU_COLLECTIVES_ENV] = "gloo"  # JAX's default cannot reduce across processes
    if flags or "XLA_FLAGS" in environ:
        changes["XLA_FLAGS"] = " ".join(flags)
    return changes


def multi_controller(hw: HardwareConfig) -> bool:
    """One process per host joined by jax.distributed (emulation always runs one process)."""
    return hw.runtime == "multi_controller" and not hw.emulate


def local_devices(hw: HardwareConfig) -> int:
    """Devices this process sees itself: its host's share under multi_controller."""
    return hw.devices // hw.hosts if multi_controller(hw) else hw.devices


def _backend_started() -> bool:
    """True once JAX has created a backend (after that, XLA_FLAGS changes are ignored)."""
    if "jax" not in sys.modules:
        return False
    from jax._src import xla_bridge  # private, but the only way to ask without starting one
    return bool(xla_bridge._backends)


def setup_platform(hw: HardwareConfig, *, job: bool = True, vllm_share: float = 0.0) -> None:
    """Prepare the process environment for `hw` before JAX initializes (UserError when a CPU
    backend already runs with another device count). job=False: a sweep's launching process."""
    if job:
        check_launch(hw, detect_launch(os.environ))
    changes = platform_env(hw, os.environ, vllm_share)
    if changes and _backend_started():
        import jax
        found = jax.local_device_count()
        if expected_platform(hw) == "cpu" and found != local_devices(hw):
            raise UserError(
                f"hardware={hw.name} needs {hw.devices} CPU device(s) but JAX already started "
                f"with {found}; call rlexp.planning.hardware.setup_platform before JAX initializes")
        return
    os.environ.update(changes)
    if "jax" in sys.modules:
        # JAX read these variables when it was imported (a sweep worker forked from a process
        # that imported it): the variables alone would not reach the backend it starts.
        import jax
        if "JAX_PLATFORMS" in changes:
            jax.config.update("jax_platforms", changes["JAX_PLATFORMS"])
        if _CPU_COLLECTIVES_ENV in changes:
            jax.config.update("jax_cpu_collectives_implementation", "gloo")


def check_launch(hw: HardwareConfig, launch: Launch) -> None:
    """One line (UserError) when the processes started do not fit hardware.runtime."""
    name = f"hardware={hw.name}"
    if multi_controller(hw):
        if hw.split == "split":
            raise UserError(
                f"{name} splits trainer and sampler over separate devices, which "
                "hardware.runtime=multi_controller does not run: use hardware.runtime=pathways "
                "(one controller over every host's devices), or hardware.emulate=true")
        if launch.launcher is None:
            if hw.hosts == 1:
                return
            raise UserError(
                f"{name} runs {hw.hosts} processes, one per host "
                "(hardware.runtime=multi_controller), but this is one plain process: start it "
                f"with `mpirun -n {hw.hosts} python -m rlexp {name} ...` (as root add "
                f"--allow-run-as-root --oversubscribe) or `srun -n {hw.hosts} python -m rlexp "
                f"{name} ...`, or add hardware.emulate=true to run its {hw.devices}-device "
                "mesh in one process")
        if launch.launcher == COORDINATOR_ENV and (launch.count is None or launch.index is None):
            raise UserError(f"{COORDINATOR_ENV} is set: also set {COUNT_ENV} (processes: "
                            f"{hw.hosts} for {name}) and {INDEX_ENV} (this one's, 0..{hw.hosts - 1})")
        if launch.count is not None and launch.count != hw.hosts:
            raise UserError(
                f"{name} runs {hw.hosts} processes (hardware.hosts={hw.hosts}) but "
                f"{launch.launcher} started {launch.count}: start {hw.hosts} (mpirun -n "
                f"{hw.hosts}, srun -n {hw.hosts}), or set hardware.hosts to match")
        if launch.index is not None and not 0 <= launch.index < hw.hosts:
            raise UserError(f"{launch.launcher} gave this process index {launch.index}: "
                            f"{name} has processes 0..{hw.hosts - 1}")
        return
    if launch.count is not None and launch.count > 1 and hw.runtime != "pathways":
        one = "hardware.emulate=true" if hw.emulate else f"hardware.runtime={hw.runtime}"
        raise UserError(
            f"{launch.launcher} started {launch.count} processes but {name} runs one ({one}): "
            "start one, or pick a multi-controller profile (e.g. hardware=cpu-2host)")


def init_distributed(hw: HardwareConfig) -> None:
    """Join a multi-controller run's processes (idempotent); the heartbeat ends all if one dies."""
    if pathways.uses_pathways(hw):  # one controller: the proxy backend, never jax.distributed
        pathways.initialize()
    if not multi_controller(hw):
        runtime.set_process(0, 1)
        return
    import jax
    if not jax.distributed.is_initialized():
        launch = detect_launch(os.environ)
        check_launch(hw, launch)
        kwargs: dict = {}
        if launch.launcher == COORDINATOR_ENV:
            kwargs = {"coordinator_address": os.environ[COORDINATOR_ENV],
                      "num_processes": launch.count, "process_id": launch.index}
            if launch.index != 0:  # jaxlib aborts (no exception) when it cannot register
                _wait_for_coordinator(hw, os.environ[COORDINATOR_ENV], launch)
        try:
            jax.distributed.initialize(
                **kwargs, initialization_timeout=hw.join_timeout_s,
                heartbeat_timeout_seconds=hw.heartbeat_timeout_s,
                # the barrier at exit: a peer that is gone is not waited for long
                shutdown_timeout_seconds=max(hw.heartbeat_timeout_s, 10))
        except Exception as exc:  # jaxlib's XlaRuntimeError (DEADLINE_EXCEEDED, UNAVAILABLE)
            where = os.environ.get(COORDINATOR_ENV) or f"the one {launch.launcher} names"
            text = str(exc).strip()
            first = text.splitlines()[0][:160] if text else type(exc).__name__
            index = "?" if launch.index is None else launch.index
            raise _join_failed(hw, index, where, first) from None
    runtime.set_process(jax.process_index(), jax.process_count())
    if jax.process_count() != hw.hosts:
        raise UserError(f"hardware={hw.name} runs {hw.hosts} processes (hardware.hosts) but "
                        f"jax.distributed joined {jax.process_count()}")


def _wait_for_coordinator(hw: HardwareConfig, address: str, launch: Launch) -> None:
    """Until hardware.join_timeout_s: process 0's coordinator accepts a TCP connection."""
    import socket
    import time
    host, _, port = address.rpartition(":")
    deadline = time.monotonic() + hw.join_timeout_s
    while True:
        try:
            with socket.create_connection((host.strip("[]"), int(port)), timeout=2):
                return
        except (OSError, ValueError) as exc:
            if time.monotonic() >= deadline:
                raise _join_failed(hw, launch.index, address, exc.strerror or exc) from None
        time.sleep(0.5)


def _join_failed(hw: HardwareConfig, index: object, where: str, detail: object) -> UserError:
    return UserError(f"process {index} of {hw.hosts} could not join the coordinator at {where} "
                     f"within hardware.join_timeout_s={hw.join_timeout_s}: {detail}; check that "
                     "process 0 runs and that its address and port are reachable")


def any_process(flag: bool) -> bool:
    """True when `flag` is true in any process of the run, so every process takes the same
    branch (a SIGTERM that reached only some of them stops them all at the same step)."""
    if runtime.process_count() < 2:
        return bool(flag)
    from jax.experimental import multihost_utils
    return bool(np.any(multihost_utils.process_allgather(np.array([int(flag)], np.int32))))


def sync_processes(name: str) -> None:
    """Wait until every process of a multi-controller run reaches this point."""
    if runtime.process_count() > 1:
        from jax.experimental import multihost_utils
        multihost_utils.sync_global_devices(name)


def to_host(x: object) -> np.ndarray:
    """A NumPy copy of `x`, gathered from every process (a collective: all call it, in order)."""
    import jax
    if isinstance(x, jax.Array) and not x.is_fully_addressable and not x.is_fully_replicated:
        from jax.experimental import multihost_utils
        return np.asarray(multihost_utils.process_allgather(x, tiled=True))
    return np.array(x)


# What a collective or jax.distributed raises in a process whose peer is gone (gloo's TCP
# pair, the coordination service's heartbeat and barriers; jaxlib 0.10.2).
_PEER_GONE = ("Gloo", "Connection reset by peer", "Connection closed by peer", "heartbeat timeout",
              "stopped sending heartbeats", "Barrier failed", "coordination service")


def lost_peer(exc: BaseException) -> str | None:
    """One line naming the lost process when `exc` says a process of this multi-controller run
    is gone (with two, the other; with more, the coordination service says), else None."""
    if runtime.process_count() < 2:
        return None
    text, seen, error = "", set(), exc
    while error is not None and id(error) not in seen:  # the exception and its causes
        seen.add(id(error))
        text += f" {error}"
        error = error.__cause__ or error.__context__
    if not any(word in text for word in _PEER_GONE):
        return None
    me, count = runtime.process_index(), runtime.process_count()
    lost = str(1 - me) if count == 2 else _dead_processes(count) or "another process"
    return (f"process {lost} of {count} was lost (its collectives broke off); process {me} "
            "stopped too: rerun the same command to resume from the last checkpoint")


def _dead_processes(count: int) -> str | None:
    """The processes the coordination service no longer counts alive ("2, 5"), or None."""
    try:
        from jax._src import distributed  # no public API lists the live processes
        alive = distributed.global_state.client.get_live_nodes(list(range(count)))
        return ", ".join(str(i) for i in range(count) if i not in alive) or None
    except Exception:  # the coordinator itself is gone: it was process 0
        return "0"


def process_lines(hw: HardwareConfig) -> list[str]:
    """The plan's process layout: hosts x devices per host, which process logs, host RAM."""
    if multi_controller(hw):
        layout = (f"{hw.hosts} (one per host, hardware.runtime=multi_controller) x "
                  f"{local_devices(hw)} {hw.platform} device(s) each; process 0 logs and writes")
    elif pathways.uses_pathways(hw):
        layout = (f"1 (the Pathways controller) over {hw.hosts} host(s) x "
                  f"{hw.devices // max(hw.hosts, 1)} device(s) each; it logs and writes")
    else:
        layout = (f"1 x {hw.devices} {expected_platform(hw)} device(s)"
                  f"{' (emulated: every host in this one)' if hw.emulate and hw.hosts > 1 else ''}")
    return [f"processes  {layout}", f"host RAM   {hw.host_memory_gib:g} GiB per host"]


def device_mismatch(hw: HardwareConfig, platform: str, count: int, kind: str) -> str | None:
    """One line saying how the visible devices differ from the profile, or None if they fit."""
    want_platform = expected_platform(hw)
    kind_ok = (hw.emulate or hw.device_kind is None
               or re.fullmatch(hw.device_kind, kind) is not None)
    platform_ok = platform == want_platform or pathways.device_ok(hw, platform)
    if platform_ok and count == hw.devices and kind_ok:
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


@dataclass(frozen=True)
class RoleDevices:
    """Which slice of the device list each role gets: [start, stop) indices."""

    trainer: tuple[int, int]
    rollout: tuple[int, int]

    @property
    def colocated(self) -> bool:
        return self.trainer == self.rollout


def role_device_ranges(hw: HardwareConfig) -> RoleDevices:
    """Device ranges per role: all when colocated; split, first/last fractions (as MaxText)."""
    n = hw.devices
    if hw.split == "colocated":
        return RoleDevices(trainer=(0, n), rollout=(0, n))
    n_train = int(round(n * hw.trainer_fraction))
    n_roll = int(round(n * hw.sampler_fraction))
    return RoleDevices(trainer=(0, n_train), rollout=(n - n_roll, n))


def replica_mesh(mesh: MeshConfig, replicas: int = 1) -> MeshConfig:
    """One sampler replica's share of the rollout mesh: its fsdp axis split `replicas` ways."""
    return MeshConfig(fsdp=mesh.fsdp // replicas, tp=mesh.tp)


def make_mesh(mesh: MeshConfig, devices: Sequence["jax.Device"],
              replicas: int = 1) -> "jax.sharding.Mesh":
    """A ("fsdp", "tp") mesh over exactly `devices`; replicas > 1: ("replica", "fsdp", "tp"),
    each replica consecutive devices holding a whole copy (MaxText's inference_replicas)."""
    import jax
    from jax.experimental import mesh_utils
    one = replica_mesh(mesh, replicas)
    shape = (mesh.fsdp, mesh.tp) if replicas == 1 else (replicas, one.fsdp, one.tp)
    axes = ("fsdp", "tp") if replicas == 1 else ("replica", "fsdp", "tp")
    try:
        # Topology-aware order on TPU (tp along the fastest ICI links).
        grid = mesh_utils.create_device_mesh(shape, list(devices), allow_split_physical_axes=True)
    except (ValueError, NotImplementedError, AssertionError):
        # Sub-slices of a TPU topology (the split halves) and CPU devices have no physical
        # layout the helper knows; row-major order of the device ids is then the layout.
        grid = np.array(list(devices)).reshape(shape)
    return jax.sharding.Mesh(grid, axes)


def role_meshes(hw: HardwareConfig, devices: Sequence["jax.Device"] | None = None,
                replicas: int = 1) -> dict[str, "jax.sharding.Mesh"]:
    """Meshes per Tunix role, trainer and rollout; the SAME Mesh when they can share weights."""
    import jax
    init_distributed(hw)
    devices = list(jax.devices() if devices is None else devices)
    check_devices(hw, devices)
    ranges = role_device_ranges(hw)
    trainer = make_mesh(hw.trainer_mesh, devices[slice(*ranges.trainer)])
    if ranges.colocated and hw.trainer_mesh == hw.rollout_mesh and replicas == 1:
        return {"trainer": trainer, "rollout": trainer}
    return {"trainer": trainer,
            "rollout": make_mesh(hw.rollout_mesh, devices[slice(*ranges.rollout)], replicas)}
