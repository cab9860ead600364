"""rollout=vllm on a TPU, the engine half: Tunix's own VllmRollout (rollout_engine="vllm"),
started from random weights its sync overwrites. No per-call seed: tpu-inference refuses one
("JAX does not support per-request seed.", tpu_platform.py validate_request), so the
engine-wide seed is train.seed.
"""

from __future__ import annotations

from typing import Any

from rlexp.base.errors import UserError
from rlexp.engine.rollout.vllm import VllmBackend


class VllmTpuBackend(VllmBackend):
    def engine(self) -> Any:
        return "vllm"

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
