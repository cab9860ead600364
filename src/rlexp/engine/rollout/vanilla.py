"""rollout=vanilla's engine half: Tunix's sampler, through a subclass of its VanillaRollout.

Tunix 0.1.7 traps handled here (tunix/rl/rollout/vanilla_rollout.py, tunix/generate/sampler.py):
the rollout reuses one PRNG key (each call takes the backend's next); it scores the old log-probs
at temperature 1 while the loss uses the sampling temperature (Rollout passes it, so the first
update's ratio is 1); its sampler tokenizes each of GRPO's num_generations copies of a prompt
again (MemoizedEncoding). Tunix's own rollout cost: one row that runs to the budget keeps the
batch decoding, and the host detokenizes and pads row by row.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any

import jax
from flax import nnx
from tunix.generate.tokenizer_adapter import TokenizerAdapter
from tunix.rl import common, reshard, utils as rl_utils
from tunix.rl.rl_cluster import Mode
from tunix.rl.rollout import base_rollout
from tunix.rl.rollout.vanilla_rollout import VanillaRollout

from rlexp.config.rules import batch_sizes
from rlexp.engine.rollout import RolloutBackend, SamplingKeys, sampling_fields


class VanillaBackend(RolloutBackend):
    @property
    def old_logps_from_trainer(self) -> bool:
        """Whether Tunix's old log-probs, scored with the sampler's weights, stand as the loss's.
        They are the trainer's where the sampler shares its weights or its copy is synced
        before every update (rollout.sync_every=1 and one mini-batch a step: Tunix samples a
        step's later mini-batches after the earlier ones' updates). Else they are the
        behaviour policy's: the loss's ratio is then taken against them, as off-policy
        sampling does without a correction (verl's bypass mode), but algo.rollout_correction
        needs the trainer's (with the copy's, every weight pi_old / pi_sampler would be 1)."""
        mini, _ = batch_sizes(self.cfg)
        current = self.cfg.rollout.sync_every == 1 and mini == self.cfg.train.batch_size
        return (self.spec.shares_trainer_weights(self.cfg) or current
                or self.cfg.algo.rollout_correction == "none")

    def configs(self) -> dict[Any, base_rollout.RolloutConfig]:
        """Tunix's sampler is greedy when top_p is None: sampling needs top_p (1.0 = off). Its
        log-probs are log_softmax(logits / temperature) over the vocabulary, as the trainer's;
        EVAL asks for them when TRAIN always does, so its sampled pass reuses training's decode
        loop compilation. Their cost every step (tiny run): none measurable on a 2-core CPU
        (0.6864 vs 0.6787 CPU s/step), 0.0489 vs 0.0339 s/step on an H100 (1.41x bare Tunix's
        step instead of 0.975x), mostly in the decode loop; bench/overhead.py --ab
        rollout.logprob_gap_every=1 measures it."""
        r, logprobs = self.cfg.rollout, self.logprobs_every_step
        return {mode: base_rollout.RolloutConfig(**sampling_fields(r, temp),
                                                 return_logprobs=logprobs)
                for mode, temp in ((Mode.TRAIN, r.temperature),
                                   (Mode.EVAL, self.cfg.eval.temperature))}

    def eval_sampling(self, greedy: bool) -> dict[str, Any]:
        # Tunix's sampler decodes greedily when top_p is None, whatever the temperature.
        top_p = 1.0 if self.cfg.rollout.top_p is None else self.cfg.rollout.top_p
        return {"top_p": None} if greedy else {"top_p": top_p,
                                               "temperature": self.cfg.eval.temperature}

    def engine(self) -> Any:
        return functools.partial(Rollout, keys=self.keys, temperature=self.cfg.rollout.temperature)


class MemoizedEncoding(TokenizerAdapter):
    """Tunix's TokenizerAdapter remembering a string's ids (Tunix copies them before BOS)."""

    def __init__(self, tokenizer: Any, limit: int = 65536):
        super().__init__(tokenizer)
        self.cached_encode = functools.lru_cache(maxsize=limit)(super().encode)

    def encode(self, text: str, **kw: Any) -> list[int]:
        if kw or not isinstance(text, str):
            return super().encode(text, **kw)
        return self.cached_encode(text)


class Rollout(VanillaRollout):
    """Tunix's VanillaRollout taking the next of `keys` each call, old log-probs at temperature."""

    def __init__(self, rollout_actor: Any, tokenizer: TokenizerAdapter, mesh: Any,
                 rollout_config: base_rollout.RolloutConfig, keys: SamplingKeys,
                 temperature: float):
        # RLCluster hands an engine class the trainer's model; for "vanilla" it loads a copy on
        # the rollout mesh unless the two meshes are one (RLCluster._load_model): so does this.
        model = rollout_actor
        if not mesh.empty and rl_utils.get_pytree_mesh_info(nnx.state(model)) != mesh:
            graph, state = nnx.split(model)
            memory = jax.devices()[0].default_memory().kind
            shardings = jax.tree_util.tree_map(
                lambda spec: jax.sharding.NamedSharding(
                    mesh, spec if spec is not None else jax.sharding.PartitionSpec(),
                    memory_kind=memory),
                nnx.get_partition_spec(state))
            model = nnx.merge(graph, reshard.reshard_pytree(state, shardings))
        c = model.config
        super().__init__(model, MemoizedEncoding(tokenizer.tokenizer), base_rollout.CacheConfig(
            cache_size=rollout_config.kv_cache_size, num_layers=c.num_layers,
            num_kv_heads=c.num_kv_heads, head_dim=c.head_dim))
        self.keys, self.temperature = keys, temperature

    def generate(self, prompts: list[str], rollout_config: base_rollout.RolloutConfig,
                 **kwargs: Any) -> base_rollout.RolloutOutput:
        config = dataclasses.replace(rollout_config, seed=self.keys.next())
        return super().generate(prompts, config, **kwargs)

    def get_per_token_logps(self, prompt_tokens: Any, completion_tokens: Any) -> Any:
        graphdef, state = self._sampler.model_def_and_state()
        return common.compute_per_token_logps(
            graphdef, state, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens,
            pad_id=self.pad_id(), eos_id=self.eos_id(), stop_gradient=True,
            return_logits=False, temperature=self.temperature)
