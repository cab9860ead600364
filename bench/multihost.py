"""One process (the emulated 4-device mesh) versus two processes (multi-controller, gloo) on the
same mesh, seed and data: the step time of each and the largest per-step metric difference.

    python bench/multihost.py                     # hardware=cpu-2host, 6 steps
    python bench/multihost.py --steps 10 train.batch_size=16

Both runs are real `python -m rlexp` commands in a fresh directory that share one run cache
(the warm start and JAX's compilation cache): first `hardware=cpu-2host hardware.emulate=true`
(one process, 4 virtual CPU devices), then `mpirun -n 2 python -m rlexp hardware=cpu-2host`
(2 processes x 2 devices, joined by jax.distributed, collectives over gloo/TCP). It reads each
run's per-step metrics back from its MLflow store and prints

  step s        median of time/step_s over the steps after the first (compiles land in step 1)
  ratio         2-process / 1-process step time
  max rel diff  the largest |a - b| / max(|b|, 1e-8) over every train/* metric and step
                (train/loss and train/reward_mean also on their own)

On one machine the two processes share its cores and talk over loopback TCP, so the ratio is
the cost of the multi-controller machinery here, not a speed-up: a real 2-host run gets a
second machine's cores.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent


def run(cmd: list[str], cwd: Path, env: dict[str, str]) -> None:
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True)
    if proc.returncode != 0:
        sys.exit(f"failed ({proc.returncode}): {' '.join(cmd)}\n{proc.stderr[-3000:]}")


def history(cwd: Path) -> dict[str, dict[int, float]]:
    from mlflow.tracking import MlflowClient

    run_dir = next((cwd / "outputs" / "runs").iterdir())
    run_id = json.loads((run_dir / "tracking.json").read_text())["run_id"]
    client = MlflowClient(f"sqlite:///{cwd / 'outputs' / 'mlflow.db'}")
    names = client.get_run(run_id).data.metrics
    return {n: {m.step: m.value for m in client.get_metric_history(run_id, n)} for n in names}


def max_rel_diff(a: dict[int, float], b: dict[int, float]) -> float:
    steps = sorted(set(a) & set(b))
    if not steps:
        return float("nan")
    x, y = np.array([a[s] for s in steps]), np.array([b[s] for s in steps])
    return float(np.max(np.abs(x - y) / np.maximum(np.abs(y), 1e-8)))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("overrides", nargs="*", help="extra rlexp overrides for both runs")
    args = parser.parse_args()
    mpirun = shutil.which("mpirun")
    if mpirun is None:
        sys.exit("mpirun not found: apt-get install openmpi-bin (bash scripts/setup --test)")
    base = ["hardware=cpu-2host", f"train.steps={args.steps}", "eval.every=0",
            "eval.num_samples=16", *args.overrides]
    root = Path(tempfile.mkdtemp(prefix="rlexp-multihost-"))
    env = {**os.environ, "RLEXP_CACHE_DIR": str(root / "cache"), "HYDRA_FULL_ERROR": "0"}
    env.pop("MLFLOW_TRACKING_URI", None)
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO / "launchers"),
                                         env.get("PYTHONPATH", "")]).rstrip(os.pathsep)
    one, two = root / "one", root / "two"
    one.mkdir()
    two.mkdir()
    print(f"rlexp multi-host bench: {' '.join(base)} (in {root})", flush=True)
    run([sys.executable, "-m", "rlexp", *base, "hardware.emulate=true"], one, env)
    run([mpirun, "--allow-run-as-root", "--oversubscribe", "-n", "2", sys.executable, "-m",
         "rlexp", *base], two, env)
    h1, h2 = history(one), history(two)

    def step_s(h: dict) -> float:
        times = [v for s, v in sorted(h["time/step_s"].items()) if s > 1]
        return float(np.median(times)) if times else float("nan")

    t1, t2 = step_s(h1), step_s(h2)
    train = [n for n in h1 if n.startswith("train/") and n in h2]
    worst = max(train, key=lambda n: max_rel_diff(h2[n], h1[n]))
    print(f"  1 process  (emulated, 4 devices)     {t1:.3f} s/step")
    print(f"  2 processes (2 x 2 devices, gloo)    {t2:.3f} s/step   ratio {t2 / t1:.2f}")
    for name in ("train/loss", "train/reward_mean"):
        print(f"  max rel diff {name:20s} {max_rel_diff(h2[name], h1[name]):.2e}")
    print(f"  max rel diff over {len(train)} train/* metrics: "
          f"{max_rel_diff(h2[worst], h1[worst]):.2e} ({worst})")
    shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
