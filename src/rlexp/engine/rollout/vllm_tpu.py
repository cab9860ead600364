"""rollout=vllm on a TPU, the engine half: Tunix's own VllmRollout (rollout_engine="vllm"),
started from random weights its sync overwrites. No per-call seed: tpu-inference refuses one
("JAX does not support per-request seed.", tpu_platform.py validate_request), so the
engine-wide seed is train.seed.
"""

from __future__ import annotations

from typing import Any

from tunix.rl.rollout import base_rollout

from rlexp.base.errors import UserError
from rlexp.engine.rollout.vllm import VllmBackend


class VllmTpuBackend(VllmBackend):
    # Tunix's VllmRollout hands the sampler's own log-probs (none here) as the old ones.
    old_logps_from_trainer = False

    def engine(self) -> Any:
        return "vllm"

    def rollout_config(self, temperature: float | None = None) -> base_rollout.RolloutConfig:
        # The cluster builds vLLM's LLM() from this config, the first call that needs the
        # chips; without them it fails on whatever it checks first (vllm-tpu 0.32.0 on a CPU:
        # "LLM(data_parallel_size=8) is not supported for single-process usage"): name the TPU.
        config = super().rollout_config(temperature)
        from vllm.platforms import current_platform  # tpu-inference's TpuPlatform on a TPU

        if not current_platform.is_tpu():
            emulated = ", hardware.emulate=true" if self.cfg.hardware.emulate else ""
            raise UserError(f"rollout=vllm on TPU: vLLM's LLM() needs TPU chips and tpu-inference "
                            f"finds none here (hardware={self.cfg.hardware.name}{emulated}): run "
                            f"on the TPU VM, or add rollout=vanilla to run it without one")
        return config

    def rollout_fields(self, temperature: float | None = None) -> dict[str, Any]:
        if not self.cfg.model.path:
            raise UserError(f"rollout=vllm needs model.path (vLLM reads the HF config and "
                            f"tokenizer from it); model={self.cfg.model.name} has none")
        return {**super().rollout_fields(temperature),
                "rollout_vllm_init_with_random_weights": True,
                "rollout_vllm_tpu_backend_type": "jax",
                "rollout_vllm_sampling_kwargs": {},
                # Not the sampled tokens' log-probs: Tunix's VllmRollout would hand them to the
                # old-log-prob pass, which expects an array (the trainer recomputes them there).
                "return_logprobs": False}

    def engine_kwargs(self) -> dict[str, Any]:
        return {"seed": self.cfg.train.seed}
