"""Does a real model learn? SmolLM2-135M-Instruct (shipped weights) on arithmetic with its
recipe (conf/recipe/smollm2-135m.yaml), in float32 and in bfloat16 compute on float32 master
weights, and (--bf16-weights) bfloat16 weights as the baseline that does not learn. Prints
held-out accuracy before -> after, wall time and s/step per precision, on whatever device JAX
finds (hardware=gpu on a GPU, else the CPU with a short run).

    python bench/real_model.py                   # device default: GPU full recipe, CPU short
    python bench/real_model.py --steps 250       # the recipe's length anywhere
    python bench/real_model.py --bf16-weights    # add model.param_dtype=bfloat16
    python bench/real_model.py -- rollout.max_completion_length=64   # extra overrides
    python bench/real_model.py --parallel        # the precisions at once, one process each

Each run writes to a temporary dir (run dir, cache, tracker off). Reference (a lent H100,
recipe as shipped, 250 steps of 16 x 8): float32 0.000 -> 0.750 in 366 s; bfloat16 weights
0.000 -> 0.000.

--parallel starts every precision's run at once (a process each, sharing the weights' and
compilation cache): on an accelerator the compiles (host CPU) overlap and the steps share a
device a 135M model leaves mostly idle, so both finish in about the time of one; s/step then
counts that sharing, for both alike.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from memory_calibration import merged  # noqa: E402

PRECISIONS = {
    "f32": ["model.dtype=float32", "model.param_dtype=float32"],
    "bf16": ["model.dtype=bfloat16", "model.param_dtype=float32"],
    "bf16-weights": ["model.dtype=bfloat16", "model.param_dtype=bfloat16"],
}
# A CPU run is a check that the pipeline learns at all, not the recipe's result: a few steps
# of a smaller batch (16 x 8 rows of 256 tokens take minutes a step on 2 cores).
CPU_SHORT = ["train.steps=3", "train.batch_size=4", "train.micro_batch_size=2",
             "algo.num_generations=4", "rollout.max_completion_length=32",
             "rollout.kv_cache_size=160", "eval.num_samples=16", "eval.every=0",
             "eval.pass_k=2", "dataset.num_eval=16"]


def device() -> str:
    """'gpu', 'tpu' or 'cpu' as JAX sees it (in a child process: this one stays JAX-free)."""
    code = "import jax; print(jax.devices()[0].platform)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    return out.stdout.strip().splitlines()[-1] if out.returncode == 0 else "cpu"


def start(precision: str, platform: str, extra: list[str], cache: Path
          ) -> tuple[subprocess.Popen, Path, float]:
    tmp = Path(tempfile.mkdtemp(prefix=f"rlexp-real-{precision}-"))
    hw = {"gpu": "hardware=gpu", "cpu": "hardware=cpu"}.get(platform, "hardware=cpu")
    cmd = [sys.executable, "-m", "rlexp", "model=smollm2-135m", hw, *PRECISIONS[precision],
           f"hydra.run.dir={tmp / 'run'}", f"run.cache_dir={cache}", "tracker=none",
           "run.progress=false", *extra]
    # output to a file, not a pipe: runs at once must not block on an unread pipe
    with open(tmp / "console.log", "w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    return proc, tmp, time.perf_counter()


def finish(precision: str, proc: subprocess.Popen, tmp: Path, started: float) -> dict:
    proc.wait()
    wall = time.perf_counter() - started
    path = tmp / "run" / "summary.json"
    if proc.returncode != 0 or not path.is_file():
        tail = (tmp / "console.log").read_text(errors="replace").strip().splitlines()[-4:]
        return {"precision": precision, "ok": False, "wall_s": wall, "error": " | ".join(tail)}
    s = json.loads(path.read_text())
    steps = max(s["steps_done"], 1)
    return {"precision": precision, "ok": True, "wall_s": wall, "steps": s["steps_done"],
            "s_per_step": s["phase_seconds"].get("step", 0.0) / steps,
            "before": s["eval_before"]["eval/accuracy"], "after": s["eval_after"]["eval/accuracy"],
            "format_before": s["eval_before"].get("eval/format_accuracy", float("nan")),
            "format_after": s["eval_after"].get("eval/format_accuracy", float("nan")),
            "reward_after": s["train_final"].get("train/reward_mean", float("nan")),
            "loss_after": s["train_final"].get("train/loss", float("nan"))}


def in_finishing_order(runs: dict[str, tuple[subprocess.Popen, Path, float]]):
    """The names of `runs` as their processes end (a run cut short still shows the others)."""
    pending = dict(runs)
    while pending:
        done = [name for name, (proc, _, _) in pending.items() if proc.poll() is not None]
        for name in done:
            del pending[name]
            yield name
        if pending and not done:
            time.sleep(0.5)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=None, help="train.steps (default: GPU/TPU the "
                   "recipe's 250, CPU a short run of 3)")
    p.add_argument("--bf16-weights", action="store_true",
                   help="also run bfloat16 weights (no float32 master)")
    p.add_argument("--parallel", action="store_true",
                   help="run the precisions at once (a process each); see the docstring")
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides (after --)")
    a = p.parse_args()
    platform = device()
    # what is given replaces CPU_SHORT's value of a key (pre-flight refuses a key given twice)
    extra = merged(CPU_SHORT if platform == "cpu" else [],
                   [f"train.steps={a.steps}"] if a.steps is not None else [], a.overrides)
    cache = Path(tempfile.mkdtemp(prefix="rlexp-real-cache-"))
    print(f"device: {platform}{' (short CPU run: a smoke check, not the recipe result)' if platform == 'cpu' else ''}")
    print(f"overrides: {' '.join(extra) or '(recipe as shipped)'}")
    print(f"{'precision':>12} {'steps':>5} {'before':>7} {'after':>7} {'delta':>7} "
          f"{'format':>11} {'reward':>7} {'wall_s':>7} {'s/step':>7}")
    names = ["f32", "bf16"] + (["bf16-weights"] if a.bf16_weights else [])
    if a.parallel:  # the weights are converted once, before the runs share them
        from rlexp.inputs.smollm2 import ensure_converted

        ensure_converted(cache)
        runs = {name: start(name, platform, extra, cache) for name in names}
        results = ((name, finish(name, *runs[name])) for name in in_finishing_order(runs))
    else:
        results = ((name, finish(name, *start(name, platform, extra, cache))) for name in names)
    rows = []
    for name, r in results:
        rows.append(r)
        if not r["ok"]:
            print(f"{name:>12} FAILED after {r['wall_s']:.0f}s: {r['error']}")
            continue
        print(f"{name:>12} {r['steps']:>5} {r['before']:>7.3f} {r['after']:>7.3f} "
              f"{r['after'] - r['before']:>+7.3f} {r['format_before']:>5.2f}->{r['format_after']:<4.2f} "
              f"{r['reward_after']:>7.3f} {r['wall_s']:>7.0f} {r['s_per_step']:>7.2f}", flush=True)
    ok = [r for r in rows if r["ok"]]
    if len(ok) >= 2 and ok[0]["s_per_step"] > 0:
        print(f"s/step ratio {ok[1]['precision']}/{ok[0]['precision']}: "
              f"{ok[1]['s_per_step'] / ok[0]['s_per_step']:.2f}")
    sys.exit(0 if len(ok) == len(rows) else 1)


if __name__ == "__main__":
    main()
