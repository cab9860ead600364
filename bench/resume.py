"""Kill runs with SIGKILL at a random step, rerun the same command, count lost/doubled steps.

    python bench/resume.py [--runs 10] [--steps 60] [--checkpoint-every 5] [--seed 0]
                           [--save-kills K]

Each trial starts `python -m rlexp` in a fresh directory, SIGKILLs it once progress.json shows
a random step, reruns the identical command, and reads the MLflow history of train/loss:
steps lost (missing from 1..N) and steps duplicated (logged more than once) must both be 0,
and the run dir must have logged to exactly one MLflow run.
It also times restart -> the first new training step (compile and restore included).

--save-kills K: K of the runs (every other one first) are killed while a checkpoint is being
written instead: the kill lands as soon as orbax's temporary dir (<step>.orbax-checkpoint-tmp-*)
of a save at or after the random step appears. Step 0's save counts (the first save). The table
says whether each such kill caught the save unfinished (the temporary dir was left behind).
"""

from __future__ import annotations

import argparse
import json
import os
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


TMP_MARK = ".orbax-checkpoint-tmp"


def saving(cwd: Path, at_least: int) -> bool:
    """A checkpoint save of a step >= at_least is under way (orbax's temporary dir exists)."""
    for folder in (cwd / "outputs/runs").glob("*/checkpoints"):
        try:
            names = os.listdir(folder)
        except OSError:
            continue
        for name in names:
            head = name.split(TMP_MARK, 1)[0]
            if TMP_MARK in name and head.isdigit() and int(head) >= at_least:
                return True
    return False


def trial(args: list[str], kill_at: int, steps: int, during_save: bool = False) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        cwd = Path(tmp)
        first = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        while not (saving(cwd, kill_at) if during_save else progress(cwd) >= kill_at):
            if first.poll() is not None:
                if during_save:  # every save at or after the target was too quick to catch
                    return {"missed": True, "during_save": True}
                raise RuntimeError("the run ended before it could be killed")
            time.sleep(0.001 if during_save else 0.01)
        first.send_signal(signal.SIGKILL)
        first.wait()
        killed_at = progress(cwd)
        torn = saving(cwd, 0)  # the save was caught unfinished
        markers = list((cwd / "outputs/runs").glob("*/progress.json"))
        if not markers:  # killed during step 0's save: no training step yet
            run_dir = next((cwd / "outputs/runs").iterdir())
            markers = [run_dir / "progress.json"]
        marker = markers[0]
        before = marker.stat().st_mtime_ns if marker.exists() else 0
        restart = time.perf_counter()
        second = subprocess.Popen(args, cwd=cwd, stdout=subprocess.DEVNULL,
                                  stderr=subprocess.PIPE, text=True)
        to_next_step = None
        while second.poll() is None:
            # progress.json is rewritten by the first training step of the new process
            if to_next_step is None and marker.exists() and marker.stat().st_mtime_ns != before:
                to_next_step = time.perf_counter() - restart
            time.sleep(0.01)
        if second.returncode != 0:
            raise RuntimeError(second.stderr.read()[-2000:])
        (run_dir,) = (cwd / "outputs/runs").iterdir()
        link = json.loads((run_dir / "tracking.json").read_text())
        summary = json.loads((run_dir / "summary.json").read_text())
        from mlflow import MlflowClient

        client = MlflowClient(link["uri"])
        logged = Counter(m.step for m in client.get_metric_history(link["run_id"], "train/loss"))
        lost = [s for s in range(1, steps + 1) if s not in logged]
        doubled = [s for s, n in logged.items() if n > 1]
        experiment = client.get_run(link["run_id"]).info.experiment_id
        runs = len(client.search_runs([experiment]))
        return {"killed_at": killed_at, "resumed_from": summary["resumed_from_step"],
                "lost": len(lost), "duplicated": len(doubled), "runs": runs,
                "during_save": during_save, "torn": torn,
                "restart_to_step_s": to_next_step or float("nan")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-kills", type=int, default=0,
                        help="how many of the runs are killed during a checkpoint save")
    opts = parser.parse_args()
    rng = random.Random(opts.seed)
    cache = Path(tempfile.mkdtemp(prefix="rlexp-bench-cache-"))
    args = [sys.executable, "-m", "rlexp", *SMALL, f"run.cache_dir={cache}",
            f"train.steps={opts.steps}", f"train.checkpoint_every={opts.checkpoint_every}"]
    rows = []
    # every other run first, so a short bench mixes both kinds of kill
    order = list(range(0, opts.runs, 2)) + list(range(1, opts.runs, 2))
    save_runs = set(order[:opts.save_kills])
    for i in range(opts.runs):
        during_save = i in save_runs
        # a save run's target is a checkpoint step (0 = the first save, before any step)
        kill_at = (rng.randrange(0, opts.steps - 1, max(opts.checkpoint_every, 1))
                   if during_save else rng.randint(2, opts.steps - 2))
        row = trial(args, kill_at, opts.steps, during_save)
        if row.get("missed"):
            print(f"run {i + 1:2d}: no save at or after step {kill_at} was caught in progress; "
                  f"not counted", flush=True)
            continue
        rows.append(row)
        state = "unfinished" if row.get("torn") else "done"
        where = (f"during the save of step >= {kill_at:3d} ({state})" if during_save
                 else f"at step {row['killed_at']:3d}")
        print(f"run {i + 1:2d}: killed {where}, resumed from {row['resumed_from']:3d}, lost "
              f"{row['lost']}, duplicated {row['duplicated']}, MLflow runs {row['runs']}, "
              f"restart -> next step {row['restart_to_step_s']:.1f} s", flush=True)
    restart = [r["restart_to_step_s"] for r in rows]
    torn = sum(r["torn"] for r in rows if r["during_save"])
    saves = sum(r["during_save"] for r in rows)
    print(f"\n{len(rows)} runs x {opts.steps} steps, SIGKILL at random steps, checkpoint every "
          f"{opts.checkpoint_every}; {saves} killed during a save ({torn} of them caught the "
          f"save unfinished)")
    print(f"steps lost:       {sum(r['lost'] for r in rows)}   (target 0)")
    print(f"steps duplicated: {sum(r['duplicated'] for r in rows)}   (target 0)")
    print(f"run dirs with more than one MLflow run: {sum(r['runs'] != 1 for r in rows)}   "
          f"(target 0)")
    print(f"restart -> next training step: median {statistics.median(restart):.1f} s, "
          f"max {max(restart):.1f} s")


if __name__ == "__main__":
    main()
