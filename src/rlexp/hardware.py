"""Devices and meshes: where a TPU/GPU/CPU mesh is built from the hardware profile.

(Minimal version; the hardware issue adds emulation, device checks and the trainer/sampler
split.)
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlexp.config import HardwareConfig, MeshConfig

if TYPE_CHECKING:
    import jax

MESH_AXES = ("fsdp", "tp")


def make_mesh(mesh: MeshConfig, devices: list | None = None) -> "jax.sharding.Mesh":
    import jax
    import numpy as np

    devices = list(devices if devices is not None else jax.devices())[: mesh.fsdp * mesh.tp]
    return jax.sharding.Mesh(np.array(devices).reshape(mesh.fsdp, mesh.tp), MESH_AXES)


def role_meshes(hw: HardwareConfig) -> dict[str, "jax.sharding.Mesh"]:
    """Meshes per Tunix role: 'trainer' (actor + reference) and 'rollout'."""
    return {"trainer": make_mesh(hw.trainer_mesh), "rollout": make_mesh(hw.rollout_mesh)}
