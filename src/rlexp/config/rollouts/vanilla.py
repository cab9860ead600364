"""rollout=vanilla: Tunix's own sampler (tunix.rl.rollout.vanilla_rollout) in the run's JAX
program; the engine half is rlexp.engine.rollout.vanilla. RolloutSpec's defaults are its rules;
what only it does is share the trainer's weights."""

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
