"""Throughput and MFU of rlexp's GRPO step on the accelerator at hand (CPU when there is none).

    python bench/accelerator.py                        # auto: GPU -> smollm2-135m, else tiny on CPU
    python bench/accelerator.py --batch-sizes 2 --steps 5 model=smollm2-135m
    python bench/accelerator.py --hardware v6e-8 model=qwen3-0.6b model.path=/ckpt/qwen3-0.6b
    python bench/accelerator.py --compare trl          # + TRL's GRPOTrainer, same shapes

Each batch size (prompts per step; rows = prompts x num_generations) is a fresh engine, in a
process of its own, whose sampler takes the whole batch in one call (rollout.micro_batch_size
= batch size), so rollout tokens/s shows how generation scales with rows, and whose update
takes the largest micro-batch the memory plan fits (rlexp.planning.plan.largest_fitting_micro; a
`train.micro_batch_size=` override wins), as TRL updates all rows at once. With `--compare
trl`, bench/peers/trl_grpo.py runs TRL's GRPOTrainer on the same Hugging Face checkpoint, rows
and lengths (it needs torch and trl, and a model.path, e.g. model=smollm2-135m) and the table
adds rlexp/TRL step time.

One global step is the real engine step (`rlexp.engine.build` + `Engine.train_step`, the code
`rlexp.job.loop.train_steps` calls): rollout, rewards, reference log-probs and the policy update inside
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
from memory_calibration import ENGINE_ONLY, compose, merged  # noqa: E402

from rlexp.config.schema import Config, ModelConfig  # noqa: E402
from rlexp.planning.memory import param_count  # noqa: E402
from rlexp.planning.plan import largest_fitting_micro  # noqa: E402


def detect_hardware() -> list[str]:
    """Overrides for the accelerator present: an NVIDIA GPU (by nvidia-smi), else the CPU."""
    smi = shutil.which("nvidia-smi")
    if smi:
        out = subprocess.run([smi, "--query-gpu=name", "--format=csv,noheader"],
                             capture_output=True, text=True).stdout
        if out.strip():
            return gpu_base("h200" if "H200" in out else "h100")
    return ["hardware=cpu", "model=tiny"]


def gpu_base(gpu: str) -> list[str]:
    """SmolLM2 at 128 + 128 tokens, 4 generations, on the gpu profile (gpu_type h100 or h200)."""
    return ["hardware=gpu", f"hardware.gpu_type={gpu}", "model=smollm2-135m",
            "model.dtype=bfloat16", "train.batch_size=8", "algo.num_generations=4",
            "rollout.max_prompt_length=128", "rollout.max_completion_length=128",
            "rollout.kv_cache_size=256"]


def shape_overrides(base: list[str], prompts: int, micro_given: bool) -> list[str]:
    """One measured shape: `prompts` a step in one sampler call; no warm-start stage, no
    tracking; update micro-batches as large as memory allows unless `micro_given`. A later
    list's key replaces an earlier one's (pre-flight refuses a key given twice)."""
    shape = merged(ENGINE_ONLY, base,
                   [f"train.batch_size={prompts}", f"rollout.micro_batch_size={prompts}"])
    if not micro_given:
        shape.append(f"train.micro_batch_size={largest_fitting_micro(compose(shape)) or 1}")
    return shape


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
    from rlexp.planning.hardware import setup_platform

    setup_platform(cfg.hardware)
    if cfg.model.name == "smollm2-135m" and cfg.model.path is None:
        from rlexp.inputs.smollm2 import ensure_converted

        cfg.model.path = str(ensure_converted(cfg.run.cache_dir))
    from rlexp.planning.plan import make_plan

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
    warmup_s = 0.0
    for i in range(warmup + steps):
        batch = engine.splits.train_batch(i, cfg.train.batch_size, cfg.train.seed)
        t = time.perf_counter()
        metrics = engine.train_step(batch, rollout_key(cfg.train.seed, i + 1))
        step_s = time.perf_counter() - t
        if i < warmup:
            warmup_s += step_s
        else:
            per_step.append({"step_s": step_s, "rollout_s": metrics["time/rollout_s"],
                             "update_s": max(step_s - metrics["time/prepare_s"], 1e-9),
                             "completion_tokens": metrics.get("train/completion_length", 0.0) * rows})
    tot = {k: sum(s[k] for s in per_step) for k in per_step[0]}
    flops = step_flops(cfg, tot["completion_tokens"] / steps)
    # A profile with no known peak (hardware=cpu): a nominal 1 TFLOP/s, MFU only indicative.
    peak = (cfg.hardware.peak_bf16_tflops or 1.0) * 1e12 * cfg.hardware.devices
    step_s, rollout_s, update_s = (tot[k] / steps for k in ("step_s", "rollout_s", "update_s"))
    return {
        "device": f"{jax.devices()[0].device_kind} x{jax.device_count()}",
        "hardware": cfg.hardware.name, "model": cfg.model.name, "dtype": cfg.model.dtype,
        "rows": rows, "seq": cfg.rollout.max_prompt_length + cfg.rollout.max_completion_length,
        "update_micro_rows": (cfg.train.micro_batch_size or cfg.train.batch_size)
        * cfg.algo.num_generations,
        "build_s": round(build_s, 1), "warmup_s": round(warmup_s, 1), "steps": steps,
        "step_s": round(step_s, 4), "rollout_s": round(rollout_s, 4), "update_s": round(update_s, 4),
        "rollout_tokens_per_s": round(tot["completion_tokens"] / tot["rollout_s"], 1),
        "train_tokens_per_s": round(flops["train_tokens"] / update_s, 1),
        "mfu_rollout": flops["rollout"] / (rollout_s * peak),
        "mfu_update": flops["update"] / (update_s * peak),
        "mfu_step": (flops["rollout"] + flops["update"] + flops["extra"]) / (step_s * peak),
        "peak_tflops": peak / 1e12,
        # what a peer needs to run the same workload
        "model_path": cfg.model.path,
        "shape": {"prompts": cfg.train.batch_size, "generations": cfg.algo.num_generations,
                  "prompt_length": cfg.rollout.max_prompt_length,
                  "completion_length": cfg.rollout.max_completion_length,
                  "dtype": cfg.model.dtype},
    }


def run_shape(overrides: list[str], steps: int, warmup: int) -> dict:
    """run() in a child process: JAX keeps the accelerator's memory (75% of it, preallocated)
    until its process ends, and TRL's peer, run next, needs it (it ran out of memory on an
    H100 at 128 rows while this process held 76 GiB). The run cache keeps later shapes'
    compiles short."""
    cmd = [sys.executable, __file__, "--part", "--steps", str(steps), "--warmup", str(warmup),
           "--", *overrides]
    started = time.perf_counter()
    proc = subprocess.run(cmd, stdout=subprocess.PIPE, text=True)  # stderr: the console
    line = next((ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")), None)
    if proc.returncode or line is None:
        sys.exit(f"bench: the rlexp run failed ({' '.join(overrides)})")
    # the process's whole life: start-up and imports + build_s + warmup_s + the timed steps
    return {**json.loads(line[len("RESULT "):]),
            "process_s": round(time.perf_counter() - started, 1)}


def default_batch_sizes(base: list[str]) -> list[int]:
    """Prompts per step: 32/128/256 rows at 4 generations on a GPU (the shapes measured
    against TRL), 2/4/8 prompts on the CPU (kept small: a few minutes in all)."""
    return [8, 32, 64] if "hardware=gpu" in base else [2, 4, 8]


def run_trl(model_path: str, shape: dict, steps: int, warmup: int) -> dict | str:
    """bench/peers/trl_grpo.py on the same checkpoint and shape; its figures, or why not."""
    peer = Path(__file__).resolve().parent / "peers" / "trl_grpo.py"
    cmd = [sys.executable, str(peer), "--model-dir", model_path, "--json",
           "--prompts", str(shape["prompts"]), "--num-generations", str(shape["generations"]),
           "--prompt-length", str(shape["prompt_length"]),
           "--completion-length", str(shape["completion_length"]),
           "--steps", str(steps), "--warmup", str(warmup), "--dtype", shape["dtype"]]
    proc = subprocess.run(cmd, capture_output=True, text=True)
    # The peer's result is its last line; Trainer.train() prints its own dict (a repr) before.
    for line in reversed(proc.stdout.splitlines()):
        try:
            out = json.loads(line)
        except ValueError:
            continue
        if not proc.returncode and isinstance(out, dict) and out.get("peer") == "trl":
            return out
    return (proc.stdout.strip().splitlines() or proc.stderr.strip().splitlines()
            or ["TRL peer failed"])[-1]


def main(argv: list[str]) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("overrides", nargs="*", help="config overrides (after the auto choice)")
    parser.add_argument("--hardware", help="hardware profile instead of the auto choice")
    parser.add_argument("--steps", type=int, default=10, help="timed steps")
    parser.add_argument("--warmup", type=int, default=2, help="untimed steps (compilation)")
    parser.add_argument("--batch-sizes", help="prompts per step, comma-separated "
                        "(default: 8,32,64 on a GPU, 2,4,8 on the CPU)")
    parser.add_argument("--compare", choices=["trl"], help="also run a peer on the same shapes")
    parser.add_argument("--part", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.part:  # one shape, in a process of its own (see run_shape)
        print("RESULT " + json.dumps(run(args.overrides, args.steps, args.warmup)), flush=True)
        return
    # the overrides replace the auto choice's keys (pre-flight refuses a key given twice)
    base = merged([f"hardware={args.hardware}"] if args.hardware else detect_hardware(),
                  args.overrides)
    sizes = ([int(x) for x in args.batch_sizes.split(",")] if args.batch_sizes
             else default_batch_sizes(base))
    rows = []
    micro_given = any(o.startswith("train.micro_batch_size=") for o in args.overrides)
    for b in sizes:
        shape = shape_overrides(base, b, micro_given)
        out = run_shape(shape, args.steps, args.warmup)
        print(json.dumps(out), flush=True)
        # as it goes: a run cut after some sizes still shows them (and where the time went)
        print(f"# {out['rows']} rows: step {out['step_s']:.3f} s, rollout "
              f"{out['rollout_tokens_per_s']:.0f} tokens/s; process {out['process_s']:.0f} s "
              f"(build {out['build_s']:.0f} s, warm-up steps {out['warmup_s']:.0f} s)", flush=True)
        if args.compare == "trl":
            out["trl"] = (run_trl(out["model_path"], out["shape"], args.steps, args.warmup)
                          if out["model_path"] else
                          "TRL needs a Hugging Face checkpoint: use model=smollm2-135m or model.path")
        rows.append(out)
    first = rows[0]
    print(f"{first['model']} ({first['dtype']}) on {first['device']}, {first['seq']} tokens/row, "
          f"peak {first['peak_tflops']:g} TFLOP/s")
    head = f"{'rows':>6} {'upd rows':>8} {'step s':>8} {'rollout tok/s':>14} {'train tok/s':>12} " \
           f"{'MFU roll':>9} {'MFU upd':>9}"
    print(head + (f" {'TRL step s':>11} {'rlexp/TRL':>10}" if args.compare else ""))
    for r in rows:
        line = (f"{r['rows']:>6} {r['update_micro_rows']:>8} {r['step_s']:>8.3f} {r['rollout_tokens_per_s']:>14.0f} "
                f"{r['train_tokens_per_s']:>12.0f} {r['mfu_rollout']:>9.2e} {r['mfu_update']:>9.2e}")
        trl = r.get("trl")
        if isinstance(trl, dict):
            line += f" {trl['step_s']:>11.3f} {r['step_s'] / trl['step_s']:>10.3f}"
        elif trl:
            line += f"  TRL: {trl}"
        print(line)
    tps = [r["rollout_tokens_per_s"] for r in rows]
    print(f"rollout tokens/s {'grows' if all(b >= a for a, b in zip(tps, tps[1:])) else 'does NOT grow'}"
          f" with rows ({' -> '.join(f'{t:.0f}' for t in tps)})")


if __name__ == "__main__":
    main(sys.argv[1:])
