"""Kill runs with SIGKILL at a random step, rerun the same command, count lost/doubled steps.

    python bench/resume.py [--runs 10] [--steps 60] [--checkpoint-every 5] [--seed 0]

Each trial starts `python -m rlexp` in a fresh directory, SIGKILLs it once progress.json shows
a random step, reruns the identical command, and reads the MLflow history of train/loss:
steps lost (missing from 1..N) and steps duplicated (logged more than once) must both be 0.
It also times restart -> the first new training step (compile and restore included).
"""

from __future__ import annotations

import argparse
import json
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

SMALL = ["train.batch_size=2", "algo.num_generations=2", "dataset.num_eval=4",
         "eval.num_samples=4", "eval.pass_k=2", "model.warm_start_steps=5", "run.progress=false"]


def progress(cwd: Path) -> int:
    try:
        return json.loads(next((cwd / "outputs/runs").glob("*/progress.json")).read_text())["step"]
    except (StopIteration, OSError, ValueError):
        return -1


def trial(args: list[str], kill_at: int, steps: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        first = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        while progress(cwd) < kill_at:
            if first.poll() is not None:
                raise RuntimeError("the run ended before it could be killed")
            time.sleep(0.01)
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed_at = progress(cwd)
        marker = next((cwd / "outputs/runs").glob("*/progress.json"))
        before = marker.stat().st_mtime_ns
        restart = time.perf_counter()
        second = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        to_next_step = None
        while second.poll() is None:
            # progress.json is rewritten by the first training step of the new process
            if to_next_step is None and marker.stat().st_mtime_ns != before:
                to_next_step = time.perf_counter() - restart
            time.sleep(0.01)
        if second.returncode != 0:
            raise RuntimeError(second.stderr.read()[-2000:])
        (run_dir,) = (cwd / "outputs/runs").iterdir()
        link = json.loads((run_dir / "tracking.json").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
        from mlflow import MlflowClient

        logged = Counter(m.step for m in MlflowClient(link["uri"]).get_metric_history(
            link["run_id"], "train/loss"))
        lost = [s for s in range(1, steps + 1) if s not in logged]
        doubled = [s for s, n in logged.items() if n > 1]
        return {"killed_at": killed_at, "resumed_from": summary["resumed_from_step"],
                "lost": len(lost), "duplicated": len(doubled),
                "restart_to_step_s": to_next_step or float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    opts = parser.parse_args()
    rng = random.Random(opts.seed)
    cache = Path(tempfile.mkdtemp(prefix="rlexp-bench-cache-"))
    args = [sys.executable, "-m", "rlexp", *SMALL, f"run.cache_dir={cache}",
            f"train.steps={opts.steps}", f"train.checkpoint_every={opts.checkpoint_every}"]
    rows = []
    for i in range(opts.runs):
        row = trial(args, rng.randint(2, opts.steps - 2), opts.steps)
        rows.append(row)
        print(f"run {i + 1:2d}: killed at step {row['killed_at']:3d}, resumed from "
              f"{row['resumed_from']:3d}, lost {row['lost']}, duplicated {row['duplicated']}, "
              f"restart -> next step {row['restart_to_step_s']:.1f} s", flush=True)
    restart = [r["restart_to_step_s"] for r in rows]
    print(f"\n{len(rows)} runs x {opts.steps} steps, SIGKILL at random steps, checkpoint every "
          f"{opts.checkpoint_every}")
    print(f"steps lost:       {sum(r['lost'] for r in rows)}   (target 0)")
    print(f"steps duplicated: {sum(r['duplicated'] for r in rows)}   (target 0)")
    print(f"restart -> next training step: median {statistics.median(restart):.1f} s, "
          f"max {max(restart):.1f} s")


if __name__ == "__main__":
    main()
