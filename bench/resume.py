"""Kill runs with SIGKILL at a random step, rerun the same command, count lost/doubled steps.

    python bench/resume.py [--runs 10] [--steps 60] [--checkpoint-every 5] [--seed 0]
                           [--save-kills K] [--disk-full D]

Each trial starts `python -m rlexp` in a fresh directory, SIGKILLs it once progress.json shows
a random step, reruns the identical command, and reads the MLflow history of train/loss:
steps lost (missing from 1..N) and steps duplicated (logged more than once) must both be 0,
and the run dir must have logged to exactly one MLflow run.
It also times restart -> the first new training step (compile and restore included).

--save-kills K: K of the runs (every other one first) are killed while a checkpoint is being
written instead: the kill lands as soon as orbax's temporary dir (<step>.orbax-checkpoint-tmp-*)
of a save at or after the random step appears. Step 0's save counts (the first save). The table
says whether each such kill caught the save unfinished (the temporary dir was left behind).

--disk-full D: D more trials (after the --runs ones) in which the disk fills up at a random
step instead: the run dir is on a small tmpfs mounted for the trial (needs root; the MLflow
store stays on the normal disk), and a filler file takes all of its free space once
progress.json shows the step. The run must stop FAILED: exit 1, one `rlexp: error:` line, no
traceback, no *.tmp file or unfinished checkpoint left, and every step up to its last good
checkpoint logged ("lost before the checkpoint", target 0). Then the filler goes (space
returns) and the same command must resume from that checkpoint: 0 lost, 0 duplicated.
"""

from __future__ import annotations

import argparse
import errno
import json
import os
import random
import shutil
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


# The tmpfs of a --disk-full trial: room for the run (two checkpoints of the tiny model, one
# being written, its export, logs) with a margin; pre-flight wants two checkpoints free.
TMPFS_SIZE = "24m"


def _mount_tmpfs(where: Path) -> str | None:
    """Mount a small tmpfs at `where`; None when done, else why it could not be."""
    proc = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_SIZE}", "tmpfs",
                           str(where)], capture_output=True, text=True)
    return None if proc.returncode == 0 else (proc.stderr.strip() or f"exit {proc.returncode}")


def _fill(where: Path) -> Path:
    """A file taking every free byte of the disk of `where` (what a full disk looks like)."""
    filler = where / "filler"
    fd = os.open(filler, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        try:
            os.posix_fallocate(fd, 0, shutil.disk_usage(where).free)
        except OSError:
            pass
        os.lseek(fd, 0, os.SEEK_END)
        while True:  # the last blocks (fallocate rounds): write until the disk says no
            try:
                os.write(fd, b"\0" * 4096)
            except OSError as exc:
                if exc.errno != errno.ENOSPC:
                    raise
                break
    finally:
        os.close(fd)
    return filler


def _logged(link: dict) -> tuple[Counter, int, str]:
    from mlflow import MlflowClient

    client = MlflowClient(link["uri"])
    logged = Counter(m.step for m in client.get_metric_history(link["run_id"], "train/loss"))
    run = client.get_run(link["run_id"])
    runs = len(client.search_runs([run.info.experiment_id]))
    return logged, runs, run.info.status


def disk_full_trial(args: list[str], fill_at: int, steps: int) -> dict:
    """The disk of the run dir fills up once progress.json shows `fill_at`; see the docstring."""
    with tempfile.TemporaryDirectory() as tmp:
        cwd, disk = Path(tmp), Path(tmp) / "disk"
        disk.mkdir()
        why = _mount_tmpfs(disk)
        if why is not None:
            raise SystemExit(f"--disk-full needs to mount a tmpfs (run as root): {why}")
        try:
            run_dir = disk / "run"
            cmd = [*args, f"hydra.run.dir={run_dir}"]
            first = subprocess.Popen(cmd, cwd=cwd, stdout=subprocess.PIPE,
                                     stderr=subprocess.PIPE, text=True)
            marker = run_dir / "progress.json"
            while True:
                try:
                    if json.loads(marker.read_text())["step"] >= fill_at:
                        break
                except (OSError, ValueError):
                    pass
                if first.poll() is not None:
                    raise RuntimeError("the run ended before the disk filled up: "
                                       + first.stderr.read()[-2000:])
                time.sleep(0.01)
            filler = _fill(disk)
            filled_at = json.loads(marker.read_text())["step"]
            out, err = first.communicate(timeout=600)
            errors = [ln for ln in err.splitlines() if ln.startswith("rlexp: error:")]
            left = [str(p.relative_to(run_dir)) for p in run_dir.rglob("*")
                    if p.name.endswith(".tmp") or ".orbax-checkpoint-tmp" in p.name]
            checkpoints = sorted(int(p.name) for p in (run_dir / "checkpoints").iterdir()
                                 if p.name.isdigit())
            last_good = max(checkpoints, default=-1)
            summary = json.loads((run_dir / "summary.json").read_text())
            link = json.loads((run_dir / "tracking.json").read_text())
            logged, _, status = _logged(link)
            lost_before = [s for s in range(1, last_good + 1) if s not in logged]
            row = {"filled_at": filled_at, "exit": first.returncode, "error_lines": len(errors),
                   "error": errors[0] if errors else err[-300:], "tracebacks":
                   err.count("Traceback"), "left": left, "last_good": last_good,
                   "summary_status": summary.get("status"), "mlflow_status": status,
                   "lost_before": len(lost_before)}

            filler.unlink()  # space returns
            second = subprocess.run(cmd, cwd=cwd, capture_output=True, text=True, timeout=900)
            if second.returncode != 0:
                raise RuntimeError(second.stderr[-2000:])
            summary = json.loads((run_dir / "summary.json").read_text())
            logged, runs, status = _logged(json.loads((run_dir / "tracking.json").read_text()))
            row.update(resumed_from=summary["resumed_from_step"], final=summary["status"],
                       final_mlflow=status, runs=runs,
                       lost=len([s for s in range(1, steps + 1) if s not in logged]),
                       duplicated=len([s for s, n in logged.items() if n > 1]))
            return row
        finally:
            subprocess.run(["umount", "-l", str(disk)], capture_output=True)


def _report_kills(rows: list[dict], opts: argparse.Namespace) -> None:
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


def _report_disk_full(full_rows: list[dict], opts: argparse.Namespace) -> None:
    clean = sum(r["exit"] == 1 and r["error_lines"] == 1 and not r["tracebacks"]
                and not r["left"] and r["summary_status"] == "FAILED"
                and r["mlflow_status"] == "FAILED" for r in full_rows)
    print(f"\n{len(full_rows)} disk-full trials x {opts.steps} steps: {clean} stopped "
          f"cleanly (exit 1, one error line, no traceback, nothing half-written, FAILED "
          f"in summary.json and MLflow)   (target {len(full_rows)})")
    print(f"steps lost before the last good checkpoint: "
          f"{sum(r['lost_before'] for r in full_rows)}   (target 0)")
    print(f"resumed from the last good checkpoint: "
          f"{sum(r['resumed_from'] == r['last_good'] for r in full_rows)} of "
          f"{len(full_rows)}; steps lost after the resume: "
          f"{sum(r['lost'] for r in full_rows)}, duplicated: "
          f"{sum(r['duplicated'] for r in full_rows)}   (target 0, 0)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=60)
    parser.add_argument("--checkpoint-every", type=int, default=5)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--save-kills", type=int, default=0,
                        help="how many of the runs are killed during a checkpoint save")
    parser.add_argument("--disk-full", type=int, default=0,
                        help="trials (after --runs) whose disk fills up at a random step")
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
    full_rows = []
    for i in range(opts.disk_full):
        fill_at = rng.randint(1, opts.steps - 2)
        row = disk_full_trial(args, fill_at, opts.steps)
        full_rows.append(row)
        print(f"disk full {i + 1:2d}: filled at step {row['filled_at']:3d}, exit {row['exit']}, "
              f"{row['error_lines']} error line(s), {row['tracebacks']} traceback(s), "
              f"left {len(row['left'])} temporary file(s), last good checkpoint "
              f"{row['last_good']}, summary {row['summary_status']}, MLflow "
              f"{row['mlflow_status']}, lost before it {row['lost_before']}; resumed from "
              f"{row['resumed_from']}: {row['final']} (MLflow {row['final_mlflow']}), lost "
              f"{row['lost']}, duplicated {row['duplicated']}, MLflow runs {row['runs']}",
              flush=True)
        print(f"    {row['error']}", flush=True)
    if rows:
        _report_kills(rows, opts)
    if full_rows:
        _report_disk_full(full_rows, opts)


if __name__ == "__main__":
    main()
