"""Per-step cost of logging 20 metrics a step to a sqlite MLflow store: rlexp's listener
(spooled, batched with log_batch by a writer thread) vs plain `mlflow.log_metrics`.

    python bench/tracking.py [--steps 200] [--compute-ms 20]

Each step also "computes" for --compute-ms with the GIL released (time.sleep; XLA releases
the GIL the same way), as a training step does: that is when rlexp's writer thread works.
Printed, in ms per step:
  loop     extra wall time of the training loop (wall - the same loop without logging)
  drain    the loop's wait at the end for what is not yet written (once, spread per step)
  cpu      process CPU time, all threads (the total work, wherever it runs)
Stores are in a temp dir and created before timing. The target is rlexp loop ms < 1.
"""

from __future__ import annotations

import argparse
import logging
import tempfile
import time
from pathlib import Path

NAMES = ["train/reward_mean", "train/loss", "train/kl", "train/clip_fraction", "time/step_s",
         "throughput/tokens_per_s"] + [f"train/reward/fn{i}" for i in range(14)]


def values(step: int) -> dict[str, float]:
    return {name: step * 0.01 + i for i, name in enumerate(NAMES)}


def baseline(steps: int, compute_s: float) -> float:
    start = time.perf_counter()
    for _ in range(steps):
        time.sleep(compute_s)
    return time.perf_counter() - start


def plain(uri: str, steps: int, compute_s: float) -> tuple[float, float]:
    import mlflow

    mlflow.set_tracking_uri(uri)
    mlflow.set_experiment("plain")
    with mlflow.start_run():
        wall, cpu = time.perf_counter(), time.process_time()
        for step in range(1, steps + 1):
            time.sleep(compute_s)
            mlflow.log_metrics(values(step), step=step)
        return time.perf_counter() - wall, time.process_time() - cpu


def rlexp(uri: str, run_dir: Path, steps: int, compute_s: float,
          checkpoint_every: int) -> tuple[float, float, float, float]:
    """(loop wall s, drain s, cpu s, on_run_end s) with rlexp's listener."""
    from rlexp.base.events import RunInfo
    from rlexp.tracking.listener import MlflowListener

    listener = MlflowListener(uri, "rlexp", run_dir, gated=checkpoint_every > 0,
                              flush_every_s=5.0)
    listener.on_run_start(RunInfo(name=run_dir.name, run_dir=run_dir, params={}, tags={}))
    wall, cpu = time.perf_counter(), time.process_time()
    for step in range(1, steps + 1):
        time.sleep(compute_s)
        listener.on_metrics(step, values(step))
        if checkpoint_every and step % checkpoint_every == 0:
            listener.on_checkpoint(step, run_dir / "ckpt")
    loop = time.perf_counter() - wall
    drain = time.perf_counter()
    listener.flush()  # what is still unwritten when the loop ends
    drain = time.perf_counter() - drain
    cpu = time.process_time() - cpu
    end = time.perf_counter()
    listener.on_run_end("FINISHED", {})  # + curves.png and summary.json
    return loop, drain, cpu, time.perf_counter() - end


def count_points(uri: str, experiment: str) -> int:
    from mlflow import MlflowClient

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name(experiment)
    return sum(len(client.get_metric_history(run.info.run_id, name))
               for run in client.search_runs([exp.experiment_id]) for name in NAMES)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--compute-ms", type=float, default=20.0)
    args = parser.parse_args()
    logging.getLogger("mlflow").setLevel(logging.WARNING)
    from rlexp.tracking import prepare_store

    n, compute = args.steps, args.compute_ms / 1000
    with tempfile.TemporaryDirectory() as tmp:
        uri = f"sqlite:///{Path(tmp) / 'mlflow.db'}"
        prepare_store(uri)
        base = baseline(n, compute)
        p_wall, p_cpu = plain(uri, n, compute)
        t_loop, t_drain, t_cpu, t_end = rlexp(uri, Path(tmp) / "timed", n, compute, 0)
        g_loop, g_drain, g_cpu, g_end = rlexp(uri, Path(tmp) / "gated", n, compute, 50)

        def ms(seconds: float) -> float:
            return seconds / n * 1000

        def over(wall: float) -> float:
            return ms(max(wall - base, 0.0))

        print(f"{n} steps x {len(NAMES)} metrics, {args.compute_ms:g} ms GIL-free compute a "
              f"step, sqlite store in a temp dir")
        print(f"  {'':28s} {'loop':>8s} {'+ drain':>8s} {'= total':>8s} {'cpu':>7s}   "
              f"(ms/step; drain: the final write, once)")
        rows = [("plain mlflow.log_metrics", over(p_wall), 0.0, ms(p_cpu), None),
                ("rlexp, flush every 5 s", over(t_loop), ms(t_drain), ms(t_cpu), t_end),
                ("rlexp, checkpoint every 50", over(g_loop), ms(g_drain), ms(g_cpu), g_end)]
        for name, loop, drain, cpu, end in rows:
            extra = f"   on_run_end {end * 1000:.0f} ms once" if end is not None else ""
            print(f"  {name:28s} {loop:8.3f} {drain:8.3f} {loop + drain:8.3f} {cpu:7.3f}{extra}")
        plain_total = rows[0][1]
        print(f"  ratio plain/rlexp, loop: {plain_total / max(rows[1][1], 1e-3):.0f}x and "
              f"{plain_total / max(rows[2][1], 1e-3):.0f}x; with the drain: "
              f"{plain_total / (rows[1][1] + rows[1][2]):.1f}x and "
              f"{plain_total / (rows[2][1] + rows[2][2]):.1f}x")
        print(f"  target rlexp loop < 1 ms/step: "
              f"{'met' if max(rows[1][1], rows[2][1]) < 1 else 'MISSED'}")
        print(f"  points stored: plain {count_points(uri, 'plain')}, rlexp "
              f"{count_points(uri, 'rlexp')} (expected {n * len(NAMES)} and "
              f"{2 * n * len(NAMES)})")


if __name__ == "__main__":
    main()
