"""What MLflow tracking costs a training step, by way of sending metrics (one process, A/B).

Each step does `--compute-ms` of GIL-releasing numpy work (as a JAX step leaves the host
thread free while the device computes), then reports 20 metrics. Variants, interleaved
`--repeats` times on fresh sqlite stores; the figure is the median extra wall time per step
over the same loop without tracking:

  listener   rlexp's MlflowListener as it is (spool append on the loop's thread; its sender
             writes batches every tracker.flush_every_s)
  async      the spool append plus MLflow's own asynchronous logging
             (log_batch(..., synchronous=False), MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS)
  sync       log_batch on the loop's thread every step (the reference)

    python bench/tracking_step.py                  # 200 steps, 30 ms compute, 3 repeats
    python bench/tracking_step.py --steps 400 --compute-ms 10
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

N_METRICS = 20


def compute(a: np.ndarray, ms: float) -> None:
    """~ms of work outside the GIL (BLAS releases it)."""
    end = time.perf_counter() + ms / 1000
    while time.perf_counter() < end:
        a @ a


def values(step: int) -> dict[str, float]:
    return {f"train/m{i}": step + i / 100 for i in range(N_METRICS)}


def loop(variant: str, steps: int, ms: float, workdir: Path, flush_every_s: float) -> float:
    """Wall seconds of `steps` steps (the end-of-run flush not included)."""
    from helpers import info

    from rlexp.tracking import prepare_store
    from rlexp.tracking.listener import MlflowListener

    a = np.random.default_rng(0).standard_normal((96, 96))
    uri = f"sqlite:///{workdir / 'mlflow.db'}"
    prepare_store(uri)
    run_dir = workdir / "run"
    end = lambda: None  # noqa: E731
    if variant == "none":
        on_metrics = lambda step, m: None  # noqa: E731
    elif variant == "listener":
        listener = MlflowListener(uri, "bench", run_dir, gated=False, flush_every_s=flush_every_s)
        listener.on_run_start(info(run_dir))
        listener._environment.join()  # its one-off work at start is not a per-step cost
        on_metrics = listener.on_metrics
        end = lambda: listener.on_run_end("FINISHED", {})  # noqa: E731
    else:
        from mlflow import MlflowClient
        from mlflow.entities import Metric

        from rlexp.tracking.spool import Spool

        client = MlflowClient(uri)
        exp = client.create_experiment("bench")
        rid = client.create_run(exp).info.run_id
        spool = Spool(workdir / "spool.jsonl")
        ops = []

        def on_metrics(step: int, m: dict[str, float]) -> None:
            t = int(time.time() * 1000)
            spool.append({"kind": "metrics", "step": step, "t": t, "values": m})
            batch = [Metric(k, v, t, step) for k, v in m.items()]
            if variant == "sync":
                client.log_batch(rid, metrics=batch)
            else:
                ops.append(client.log_batch(rid, metrics=batch, synchronous=False))

        def end() -> None:
            for op in ops:
                op.wait()
            client.set_terminated(rid)
    started = time.perf_counter()
    for step in range(1, steps + 1):
        compute(a, ms)
        on_metrics(step, values(step))
    wall = time.perf_counter() - started
    end()
    return wall


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--compute-ms", type=float, default=30.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--flush-every-s", type=float, default=5.0)
    parser.add_argument("--variants", default="listener,async,sync")
    args = parser.parse_args()
    # MLflow reads whole seconds only
    os.environ["MLFLOW_ASYNC_LOGGING_BUFFERING_SECONDS"] = str(max(1, round(args.flush_every_s)))
    variants = ["none", *args.variants.split(",")]
    walls: dict[str, list[float]] = {v: [] for v in variants}
    for _ in range(args.repeats):
        for variant in variants:
            with tempfile.TemporaryDirectory() as tmp:
                walls[variant].append(loop(variant, args.steps, args.compute_ms, Path(tmp),
                                           args.flush_every_s))
    base = statistics.median(walls["none"])
    print(f"{args.steps} steps x {N_METRICS} metrics, {args.compute_ms:g} ms compute a step, "
          f"median of {args.repeats}; bare loop {base / args.steps * 1000:.2f} ms/step")
    for variant in variants[1:]:
        extra = [(w - b) / args.steps * 1000 for w, b in zip(walls[variant], walls["none"])]
        print(f"  {variant:9s} +{statistics.median(extra):6.3f} ms/step "
              f"(runs: {', '.join(f'{e:.3f}' for e in extra)})")


if __name__ == "__main__":
    main()
