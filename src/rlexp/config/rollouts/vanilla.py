"""rollout=vanilla: Tunix's own sampler in the run's JAX program (RolloutSpec's defaults); the
engine half is rlexp.engine.rollout.vanilla."""

from __future__ import annotations

from rlexp.config.rollouts import RolloutSpec
from rlexp.config.schema import Config


class VanillaSpec(RolloutSpec):
    engine = "rlexp.engine.rollout.vanilla.VanillaBackend"

    def shares_trainer_weights(self, cfg: Config) -> bool:
        """On the trainer's very mesh (colocated, same shape, one replica) Tunix gives the
        sampler the trainer's copy of the weights and never syncs."""
        r, h = cfg.rollout, cfg.hardware
        return h.split == "colocated" and h.trainer_mesh == h.rollout_mesh and r.replicas == 1
