"""Does the default run learn? Runs the default `python -m rlexp` once per seed and prints
eval accuracy before (after the warm start) and after RL, steps and wall-clock.

    python bench/learning.py                 # seed 0, cold (fresh warm-start cache)
    python bench/learning.py --seeds 0 1 2   # several seeds
    python bench/learning.py --warm          # reuse outputs/cache (warm start cached)
    python bench/learning.py -- algo=gspo    # extra overrides after --
    python bench/learning.py --algos all     # every conf/algo/ algorithm, one after another
    python bench/learning.py --algos grpo cispo sapo -- train.steps=100

--algos prints, per algorithm, accuracy before -> after and the seconds per step (total step
time / steps, compile included, and the last step's) relative to GRPO's in the same run;
every algorithm runs with algo.num_iterations=2 (as sweeps/algorithms.yaml) unless an override
sets it.

Each run writes to a temporary dir (run dir, MLflow store, cache unless --warm).
Target (the issue): accuracy after - before >= 0.30, within ~10 minutes on a 2-core CPU.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

CONF_ALGO = Path(__file__).resolve().parent.parent / "conf" / "algo"

TARGET_DELTA = 0.30
TARGET_WALL_S = 600


def run_once(seed: int, warm: bool, extra: list[str], keep: Path | None) -> dict:
    tmp = Path(tempfile.mkdtemp(prefix="rlexp-learning-", dir=keep))
    cmd = [sys.executable, "-m", "rlexp", f"train.seed={seed}", f"hydra.run.dir={tmp / 'run'}",
           f"tracker.uri=sqlite:///{tmp / 'mlflow.db'}", "run.progress=false", *extra]
    if not warm:
        cmd.append(f"run.cache_dir={tmp / 'cache'}")
    started = time.perf_counter()
    proc = subprocess.run(cmd, capture_output=True, text=True)
    wall = time.perf_counter() - started
    # ru_maxrss of the largest child so far (KiB on Linux): the runs are sequential and
    # similar, so this is this run's peak unless an earlier one was larger.
    rss_mb = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    summary_path = tmp / "run" / "summary.json"
    if proc.returncode != 0 or not summary_path.is_file():
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-5:]
        return {"seed": seed, "ok": False, "wall_s": wall, "error": " | ".join(tail)}
    s = json.loads(summary_path.read_text())
    return {"seed": seed, "ok": True, "wall_s": wall, "steps": s["steps_done"],
            "before": s["eval_before"]["eval/accuracy"], "after": s["eval_after"]["eval/accuracy"],
            "pass_before": s["eval_before"]["eval/pass_at_k"],
            "pass_after": s["eval_after"]["eval/pass_at_k"],
            "warm_start_s": s.get("engine", {}).get("warm_start/seconds", 0.0), "rss_mb": rss_mb,
            "step_s": s.get("phase_seconds", {}).get("step", 0.0) / max(s["steps_done"], 1),
            "last_step_s": (s.get("train_final") or {}).get("time/step_s", float("nan")),
            "dir": str(tmp)}


def compare_algorithms(algos: list[str], seed: int, warm: bool, extra: list[str],
                       keep: Path | None) -> None:
    """One run per algorithm, same seed and data: before -> after and s/step vs GRPO."""
    if algos == ["all"]:
        algos = sorted(p.stem for p in CONF_ALGO.glob("*.yaml"))
    if "grpo" in algos:  # the reference first
        algos = ["grpo"] + [a for a in algos if a != "grpo"]
    if not any(o.startswith("algo.num_iterations=") for o in extra):
        extra = [*extra, "algo.num_iterations=2"]
    print(f"{'algo':<22} {'before':>7} {'after':>7} {'delta':>7} {'s/step':>7} {'vs grpo':>8} "
          f"{'last s/step':>11} {'wall s':>7}")
    ref = None
    for algo in algos:
        r = run_once(seed, warm, [f"algo={algo}", *extra], keep)
        if not r["ok"]:
            print(f"{algo:<22} FAILED after {r['wall_s']:.0f}s: {r['error']}", flush=True)
            continue
        ref = r["step_s"] if algo == "grpo" else ref
        rel = f"{r['step_s'] / ref:>7.2f}x" if ref else f"{'-':>8}"
        delta = r["after"] - r["before"]
        print(f"{algo:<22} {r['before']:>7.3f} {r['after']:>7.3f} {delta:>+7.3f} "
              f"{r['step_s']:>7.3f} {rel} {r['last_step_s']:>11.3f} {r['wall_s']:>7.0f}",
              flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--seeds", type=int, nargs="+", default=[0])
    p.add_argument("--warm", action="store_true", help="reuse outputs/cache (no warm-start cost)")
    p.add_argument("--keep", type=Path, default=None, help="parent dir for the run dirs")
    p.add_argument("--algos", nargs="+", default=None,
                   help="compare algorithms (conf/algo/ names, or 'all') on the first seed")
    p.add_argument("overrides", nargs="*", help="extra Hydra overrides (after --)")
    a = p.parse_args()
    if a.algos:
        compare_algorithms(a.algos, a.seeds[0], a.warm, a.overrides, a.keep)
        return
    print(f"{'seed':>4} {'steps':>5} {'before':>7} {'after':>7} {'delta':>7} "
          f"{'pass@k':>13} {'wall s':>7} {'warm-start s':>12} {'peak RSS MB':>11}")
    results = []
    for seed in a.seeds:
        r = run_once(seed, a.warm, a.overrides, a.keep)
        results.append(r)
        if not r["ok"]:
            print(f"{seed:>4} FAILED after {r['wall_s']:.0f}s: {r['error']}")
            continue
        print(f"{seed:>4} {r['steps']:>5} {r['before']:>7.3f} {r['after']:>7.3f} "
              f"{r['after'] - r['before']:>+7.3f} {r['pass_before']:>6.3f}->{r['pass_after']:<6.3f}"
              f"{r['wall_s']:>7.0f} {r['warm_start_s']:>12.1f} {r['rss_mb']:>11.0f}", flush=True)
    ok = [r for r in results if r["ok"]]
    if ok:
        deltas = [r["after"] - r["before"] for r in ok]
        print(f"delta: mean {sum(deltas) / len(deltas):+.3f}, min {min(deltas):+.3f} "
              f"(target >= {TARGET_DELTA:+.2f}); wall: max {max(r['wall_s'] for r in ok):.0f}s "
              f"(target <= {TARGET_WALL_S}s); {sum(d >= TARGET_DELTA for d in deltas)}/{len(ok)} "
              f"seeds meet the target")


if __name__ == "__main__":
    main()
