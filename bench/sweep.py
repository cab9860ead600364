"""Sweep throughput: 8 tiny jobs sequential (basic) vs joblib (2 workers), and SLURM dispatch.

    python bench/sweep.py                  # 8 jobs each way + SLURM overhead (if sbatch works)
    python bench/sweep.py --jobs 4 --no-slurm --json out.json
    python bench/sweep.py --no-compilation-cache   # JAX compiles in every job (the old default)
    python bench/sweep.py --no-slurm --repeats 3   # modes alternate; medians (a noisy VM)

Each mode runs the same sweep (`train.seed=0..N-1` at tiny size, MLflow on) in a fresh
directory, so nothing is skipped as already finished; the run cache (warm-start weights and
JAX's persistent compilation cache, both on by default) and MLflow's schema template are
shared and filled once before timing, so both modes pay for the same work. Prints wall times, seconds per
job, the joblib/basic ratio (target <= 0.65) and the per-job dispatch overhead of SLURM through
submitit (submit -> result of a trivial function, median of several).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# The smallest real training run (as in tests/sweep_helpers.py): no supervised warm start,
# vocab_size=128 because conf/model/tiny.yaml's 64 is below the char tokenizer's minimum.
TINY = ["train.steps=2", "train.batch_size=2", "eval.num_samples=4", "dataset.num_eval=4",
        "eval.pass_k=1", "run.progress=false", "model.warm_start_steps=0", "model.vocab_size=128"]
TARGET_RATIO = 0.65


def rlexp(args: list[str], cwd: Path, extra_env: dict[str, str] | None = None
          ) -> tuple[float, subprocess.CompletedProcess]:
    env = {k: v for k, v in os.environ.items() if k != "MLFLOW_TRACKING_URI"}
    env.update(extra_env or {})
    t0 = time.perf_counter()
    proc = subprocess.run([sys.executable, "-m", "rlexp", *args], cwd=cwd, env=env,
                          capture_output=True, text=True)
    return time.perf_counter() - t0, proc


def check(proc: subprocess.CompletedProcess, what: str) -> None:
    if proc.returncode != 0:
        sys.exit(f"{what} failed (exit {proc.returncode}):\n{proc.stdout[-3000:]}\n"
                 f"{proc.stderr[-3000:]}")


def finished_jobs(cwd: Path) -> int:
    n = 0
    for path in (cwd / "outputs" / "sweeps").glob("*/*/summary.json"):
        n += json.loads(path.read_text()).get("status") == "FINISHED"
    return n


def sweep(mode: list[str], jobs: int, cache: Path, work: Path, name: str,
          env: dict[str, str], tiny: list[str]) -> float:
    cwd = work / name
    cwd.mkdir(parents=True)
    seeds = ",".join(str(s) for s in range(jobs))
    wall, proc = rlexp(["-m", *mode, f"train.seed={seeds}", f"run.cache_dir={cache}", *tiny], cwd,
                       env)
    check(proc, name)
    done = finished_jobs(cwd)
    if done != jobs:
        sys.exit(f"{name}: {done}/{jobs} jobs finished")
    return wall


def slurm_overhead(repeats: int, work: Path) -> dict[str, float] | None:
    """Seconds from submit to result of a trivial function on SLURM via submitit (median)."""
    if shutil.which("sbatch") is None:
        return None
    try:
        import submitit
    except ImportError:
        return None
    executor = submitit.AutoExecutor(folder=work / "submitit", cluster="slurm")
    executor.update_parameters(timeout_min=4, cpus_per_task=1)  # > USR2@90 + 60 s
    times = []
    for i in range(repeats):
        t0 = time.perf_counter()
        job = executor.submit(pow, 2, i)
        job.result()
        times.append(time.perf_counter() - t0)
    # sbatch --wait round trip of a shell one-liner: the scheduler alone, no Python.
    sb = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        subprocess.run(["sbatch", "--wait", "--quiet", "-o", "/dev/null", "-t", "1",
                        "--wrap", "true"], check=True, timeout=120)
        sb.append(time.perf_counter() - t0)
    return {"submitit_median_s": statistics.median(times), "submitit_min_s": min(times),
            "sbatch_wait_median_s": statistics.median(sb)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=8)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--slurm-repeats", type=int, default=5)
    parser.add_argument("--no-slurm", action="store_true")
    parser.add_argument("--repeats", type=int, default=1,
                        help="time each mode this many times, alternating; report medians")
    parser.add_argument("--json", type=Path, help="also write the figures here")
    parser.add_argument("--no-compilation-cache", action="store_true",
                        help="run.compilation_cache=false: every job compiles for itself")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="rlexp-bench-sweep-"))
    cache = work / "cache"
    env: dict[str, str] = {}
    tiny = [*TINY, *(["run.compilation_cache=false"] if args.no_compilation_cache else [])]
    try:
        # Fill the run cache, MLflow's schema template (~/.cache/rlexp) and the OS file cache
        # of the imports once, untimed: both modes then start from the same state.
        warm = work / "warm"
        warm.mkdir()
        t_warm, proc = rlexp([f"run.cache_dir={cache}", *tiny], warm, env)
        check(proc, "warm-up run")

        load_before = os.getloadavg()[0]
        basics, joblibs = [], []
        for r in range(args.repeats):
            basics.append(sweep(["hydra/launcher=basic"], args.jobs, cache, work,
                                f"basic/{r}", env, tiny))
            joblibs.append(sweep(["hydra/launcher=joblib", f"hydra.launcher.n_jobs={args.workers}"],
                                 args.jobs, cache, work, f"joblib/{r}", env, tiny))
        load_after = os.getloadavg()[0]
        t_basic, t_joblib = statistics.median(basics), statistics.median(joblibs)
        ratio = t_joblib / t_basic
        figures = {
            "repeats": args.repeats, "basic_walls_s": [round(t, 2) for t in basics],
            "joblib_walls_s": [round(t, 2) for t in joblibs],
            "jobs": args.jobs, "workers": args.workers, "cpus": os.cpu_count(),
            "compilation_cache": not args.no_compilation_cache,
            # Other work on the machine competes for the same cores: report it with the times.
            "load_avg_1min_before": round(load_before, 2), "load_avg_1min_after": round(load_after, 2),
            "warm_up_single_run_s": round(t_warm, 2),
            "basic_wall_s": round(t_basic, 2), "basic_s_per_job": round(t_basic / args.jobs, 2),
            "joblib_wall_s": round(t_joblib, 2), "joblib_s_per_job": round(t_joblib / args.jobs, 2),
            "joblib_over_basic": round(ratio, 3), "target_ratio": TARGET_RATIO,
            "meets_target": ratio <= TARGET_RATIO,
        }
        if not args.no_slurm:
            slurm = slurm_overhead(args.slurm_repeats, work)
            figures["slurm"] = {k: round(v, 2) for k, v in slurm.items()} if slurm else None
    finally:
        shutil.rmtree(work, ignore_errors=True)

    print(f"sweep of {args.jobs} tiny jobs on {figures['cpus']} CPUs"
          f"{'' if args.no_compilation_cache else ' (shared JAX compilation cache, the default)'}"
          f"; load average "
          f"{figures['load_avg_1min_before']} before, {figures['load_avg_1min_after']} after")
    print(f"  single run (warm-up)        {figures['warm_up_single_run_s']:8.1f} s")
    print(f"  basic  (sequential)         {t_basic:8.1f} s   {figures['basic_s_per_job']:.1f} s/job")
    print(f"  joblib ({args.workers} workers)          {t_joblib:8.1f} s   "
          f"{figures['joblib_s_per_job']:.1f} s/job")
    if args.repeats > 1:
        print(f"  (medians of {args.repeats}: basic {figures['basic_walls_s']}, joblib "
              f"{figures['joblib_walls_s']})")
    print(f"  joblib / basic              {ratio:8.3f}     (target <= {TARGET_RATIO}: "
          f"{'met' if figures['meets_target'] else 'NOT met'})")
    slurm = figures.get("slurm")
    if slurm:
        print(f"  SLURM dispatch, submitit    {slurm['submitit_median_s']:8.2f} s/job (median; "
              f"min {slurm['submitit_min_s']:.2f}); sbatch --wait alone "
              f"{slurm['sbatch_wait_median_s']:.2f} s")
    elif not args.no_slurm:
        print("  SLURM dispatch              n/a (no sbatch/submitit here: .ci/slurm.sh)")
    if args.json:
        args.json.write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
