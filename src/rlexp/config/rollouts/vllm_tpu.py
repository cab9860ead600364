"""rollout=vllm on a TPU: Tunix's own VllmRollout over tpu-inference, beside Tunix in the run's
Python; rollout=vllm's rules and plan, and its pre-flight also needs tpu-inference."""

from __future__ import annotations

import importlib.util

from rlexp.base.errors import UserError
from rlexp.config.rollouts import RolloutSpec
from rlexp.config.rollouts.vllm import VANILLA, VllmSpec
from rlexp.config.schema import Config


class VllmTpuSpec(VllmSpec):
    engine = "rlexp.engine.rollout.vllm_tpu.VllmTpuBackend"

    def on(self, platform: str) -> RolloutSpec:
        return self

    def check_installed(self, cfg: Config, here: bool) -> None:
        super().check_installed(cfg, here)
        if not cfg.hardware.emulate and importlib.util.find_spec("tpu_inference") is None:
            raise UserError("rollout=vllm on TPU needs tpu-inference, which pins qwix below "
                            "Tunix 0.1.7's: install it as Tunix's TPU CI does with `bash "
                            "scripts/tpu_stack` (Python 3.12, tpu-inference 0.32.0, jax 0.11.2) "
                            f"and run with that Python; {VANILLA}")
