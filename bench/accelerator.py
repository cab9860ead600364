"""Throughput and MFU of rlexp's GRPO step on the accelerator at hand (CPU when there is none).

    python bench/accelerator.py                        # auto: GPU -> smollm2-135m, else tiny on CPU
    python bench/accelerator.py --steps 5 model=smollm2-135m train.batch_size=2
    python bench/accelerator.py --hardware v6e-8 model=qwen3-0.6b model.path=/ckpt/qwen3-0.6b

One global step is the real engine step (`rlexp.engine.build` + `Engine.train_step`, the code
`rlexp.loop.run` calls): rollout, rewards, reference log-probs and the policy update inside
Tunix's GRPO learner. After `--warmup` steps (compilation) it times `--steps` steps and prints

  rollout tokens/s   completion tokens generated / rollout seconds
  train tokens/s     prompt+completion tokens the update processes / update seconds
  MFU                model FLOPs / (seconds x hardware.peak_bf16_tflops x devices), for the
                     rollout, the update and the whole step

FLOPs per token of a forward pass: 2 x matmul parameters + 4 x layers x q_width x context
(attention scores and values, PaLM appendix B); an update is 3 forward passes (forward +
backward); the reference model and the old-policy log-probs (num_iterations > 1) add a forward
each. CPU peaks are nominal (hardware=cpu says 1 TFLOP/s), so CPU MFU is only indicative.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_calibration import compose  # noqa: E402

from rlexp.config import Config, ModelConfig  # noqa: E402
from rlexp.memory import param_count  # noqa: E402


def detect_hardware() -> list[str]:
    """Overrides for the accelerator present: an NVIDIA GPU (by nvidia-smi), else the CPU."""
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout
        if out.strip():
            gpu = "h200" if "H200" in out else "h100"
            return ["hardware=gpu", f"hardware.gpu_type={gpu}", "model=smollm2-135m",
                    "model.dtype=bfloat16", "train.batch_size=8", "algo.num_generations=4",
                    "rollout.max_prompt_length=128", "rollout.max_completion_length=128",
                    "rollout.kv_cache_size=256"]
    return ["hardware=cpu", "model=tiny"]


def matmul_params(m: ModelConfig) -> int:
    """Parameters that take part in matmuls: all but the input embedding lookup (which a tied
    model still spends as its output projection)."""
    n = param_count(m)
    return n if m.tie_embeddings else n - m.vocab_size * m.embed_dim


def forward_flops_per_token(m: ModelConfig, context: float) -> float:
    return 2 * matmul_params(m) + 4 * m.num_layers * m.num_heads * m.head_dim * context


def step_flops(cfg: Config, completion_tokens: float) -> dict[str, float]:
    """Model FLOPs of one global step: rollout, update and the extra forward passes."""
    m, r, a = cfg.model, cfg.rollout, cfg.algo
    rows = cfg.train.batch_size * a.num_generations
    seq = r.max_prompt_length + r.max_completion_length
    gen_per_row = completion_tokens / rows
    prefill = rows * r.max_prompt_length * forward_flops_per_token(m, r.max_prompt_length / 2)
    decode = completion_tokens * forward_flops_per_token(m, r.max_prompt_length + gen_per_row / 2)
    fwd = rows * seq * forward_flops_per_token(m, seq / 2)
    extra = fwd * ((1 if a.beta > 0 else 0) + (1 if a.num_iterations > 1 else 0))
    return {"rollout": prefill + decode, "update": 3 * fwd * a.num_iterations, "extra": extra,
            "train_tokens": rows * seq * a.num_iterations}


def run(overrides: list[str], steps: int, warmup: int) -> dict:
    cfg = compose(overrides)
    from rlexp.hardware import setup_platform

    setup_platform(cfg.hardware)
    if cfg.model.name == "smollm2-135m" and cfg.model.path is None:
        from rlexp.smollm2 import ensure_converted

        cfg.model.path = str(ensure_converted(cfg.run.cache_dir))
    from rlexp.plan import make_plan

    plan = make_plan(cfg)
    if not plan.fits:
        raise SystemExit(f"bench: {plan.why}")
    import jax

    from rlexp.engine import build, rollout_key

    run_dir = Path(tempfile.mkdtemp(prefix="rlexp-bench-"))
    t0 = time.perf_counter()
    engine = build(cfg, plan, run_dir)
    build_s = time.perf_counter() - t0
    rows = cfg.train.batch_size * cfg.algo.num_generations
    per_step = []
    for i in range(warmup + steps):
        batch = engine.splits.train_batch(i, cfg.train.batch_size, cfg.train.seed)
        t = time.perf_counter()
        metrics = engine.train_step(batch, rollout_key(cfg.train.seed, i + 1))
        step_s = time.perf_counter() - t
        if i >= warmup:
            per_step.append({"step_s": step_s, "rollout_s": metrics["time/rollout_s"],
                             "update_s": max(step_s - metrics["time/prepare_s"], 1e-9),
                             "completion_tokens": metrics.get("train/completion_length", 0.0) * rows})
    tot = {k: sum(s[k] for s in per_step) for k in per_step[0]}
    flops = step_flops(cfg, tot["completion_tokens"] / steps)
    peak = cfg.hardware.peak_bf16_tflops * 1e12 * cfg.hardware.devices
    step_s, rollout_s, update_s = (tot[k] / steps for k in ("step_s", "rollout_s", "update_s"))
    return {
        "device": f"{jax.devices()[0].device_kind} x{jax.device_count()}",
        "hardware": cfg.hardware.name, "model": cfg.model.name, "dtype": cfg.model.dtype,
        "rows": rows, "seq": cfg.rollout.max_prompt_length + cfg.rollout.max_completion_length,
        "build_s": round(build_s, 1), "steps": steps,
        "step_s": round(step_s, 4), "rollout_s": round(rollout_s, 4), "update_s": round(update_s, 4),
        "rollout_tokens_per_s": round(tot["completion_tokens"] / tot["rollout_s"], 1),
        "train_tokens_per_s": round(flops["train_tokens"] / update_s, 1),
        "mfu_rollout": flops["rollout"] / (rollout_s * peak),
        "mfu_update": flops["update"] / (update_s * peak),
        "mfu_step": (flops["rollout"] + flops["update"] + flops["extra"]) / (step_s * peak),
        "peak_tflops": peak / 1e12,
    }


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="config overrides (after the auto choice)")
    parser.add_argument("--hardware", help="hardware profile instead of the auto choice")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (compilation)")
    args = parser.parse_args(argv)
    base = [f"hardware={args.hardware}"] if args.hardware else detect_hardware()
    # Benchmarks measure speed: no warm-start stage, no tracking.
    out = run([*base, "model.warm_start_steps=0", "tracker=none", *args.overrides],
              args.steps, args.warmup)
    print(json.dumps(out))
    print(f"{out['model']} on {out['device']}: rollout {out['rollout_tokens_per_s']:.0f} tok/s, "
          f"train {out['train_tokens_per_s']:.0f} tok/s, step {out['step_s']:.3f} s, MFU "
          f"rollout {out['mfu_rollout']:.2e} update {out['mfu_update']:.2e} step "
          f"{out['mfu_step']:.2e} (peak {out['peak_tflops']:g} TFLOP/s)")


if __name__ == "__main__":
    main(sys.argv[1:])
