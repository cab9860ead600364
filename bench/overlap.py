"""Rollout beside the update (rollout.off_policy_steps=1) against the synchronous run, on an
emulated split: trainer and sampler each on a virtual CPU device of its own.

The synchronous run (off_policy_steps=0) gives the rollout time r (time/rollout_s: the sampler
calls) and the rest of the step t (rewards, log-probs, the update, the weight copy): sampling
beside the update can at best bring a step from r + t to max(r, t), an ideal speedup of
(r + t) / max(r, t). The overlapped run's speedup is the ratio of the two runs' steady s/step;
achieved/ideal is what this prints last (goal: >= 0.8). Each run is its own process (as
bench/overhead.py's parts), steady state = median after the compile steps.

    python bench/overlap.py            # 16 steps a run
    python bench/overlap.py --quick    # 8 steps a run (CI, checks)
    python bench/overlap.py -- rollout.max_completion_length=64

Both virtual devices run on the same host CPUs: the two phases overlap only as far as the
cores are free (XLA's CPU client gives each device's programs the whole intra-op thread pool).
Measured --quick on the 2-core VM under other jobs' load (8-15), 5 steady steps a run: r 0.576
s, t 2.621 s, 3.165 s/step synchronous (ideal 1.220); overlapped 2.751 s/step, the sampler
(0.982 s) never waited for: speedup 1.150, achieved/ideal 0.943. The tiny model's step is
mostly the update on CPU, which bounds the ideal at 1.22.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from overhead import median, part_rlexp

SKIP = 3  # compile steps left out of the steady state
# The two virtual CPU devices (the CLI sets them from the profile, planning.hardware.platform_env;
# a part runs experiment.run directly).
DEVICES = {"JAX_PLATFORMS": "cpu", "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
SPLIT = ["hardware.emulate=true", "hardware.devices=2", "hardware.chips=2",
         "hardware.split=split", "hardware.trainer_fraction=0.5", "hardware.sampler_fraction=0.5",
         "tracker=none", "eval.every=0"]


def steady(result: dict, key: str) -> float:
    return median([t[key] for t in result["times"][SKIP:] if key in t])


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true", help="8 steps a run instead of 16")
    p.add_argument("--part", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    p.add_argument("overrides", nargs="*")
    a = p.parse_args()
    if a.part:
        print("RESULT " + json.dumps(part_rlexp(a.workdir, a.overrides)), flush=True)
        return
    work = Path(tempfile.mkdtemp(prefix="rlexp-overlap-"))
    steps = 8 if a.quick else 16
    common = [*SPLIT, f"train.steps={steps}", f"run.cache_dir={work / 'cache'}", *a.overrides]
    runs = {}
    for k in (0, 1):
        part = work / f"k{k}"
        part.mkdir()
        proc = subprocess.run([sys.executable, __file__, "--part", "--workdir", str(part),
                               *common, f"rollout.off_policy_steps={k}"],
                              capture_output=True, text=True,
                              env={**os.environ, "PYTHONUNBUFFERED": "1", **DEVICES})
        line = next((x for x in proc.stdout.splitlines() if x.startswith("RESULT ")), None)
        if proc.returncode or line is None:
            sys.exit(f"off_policy_steps={k} run failed:\n{proc.stderr[-3000:]}")
        runs[k] = json.loads(line[len("RESULT "):])
    sync, over = runs[0], runs[1]
    r = steady(sync, "time/rollout_s")
    t = steady(sync, "time/step_s") - r
    ideal = (r + t) / max(r, t)
    s0, s1 = median(sync["intervals"][SKIP:]), median(over["intervals"][SKIP:])
    print(f"synchronous run: rollout r {r:.3f} s, rest of the step t {t:.3f} s, "
          f"{s0:.3f} s/step; ideal speedup (r+t)/max(r,t) {ideal:.3f}")
    print(f"overlapped run (off_policy_steps=1): {s1:.3f} s/step; sampler "
          f"{steady(over, 'time/sampler_s'):.3f} s beside the update, waited for "
          f"{steady(over, 'time/rollout_s'):.3f} s; speedup {s0 / s1:.3f}")
    print(f"CPU s/step: synchronous {median(sync['cpu_intervals'][SKIP:]):.3f}, overlapped "
          f"{median(over['cpu_intervals'][SKIP:]):.3f} (on {os.cpu_count()} cores)")
    print(f"achieved/ideal speedup: {s0 / s1 / ideal:.3f} (goal >= 0.8)")


if __name__ == "__main__":
    main()
