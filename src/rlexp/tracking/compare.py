"""Compare runs: one row per run (swept values, reward, accuracy, steps, wall time, status).

Rows come from MLflow (children of a sweep's parent run, or all runs of an experiment) and,
for a sweep dir, from the jobs' summary.json files, so a sweep tracked with tracker=none or
jobs whose store was unreachable still show up. Used by `python -m rlexp.report` and by the
sweep callback's summary artifacts.
"""

from __future__ import annotations

import csv
import io
import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.tracking.plots import plot_compare
from rlexp.tracking.run import fetch_history

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

REWARD = "train/reward_mean"
ACCURACY = "eval/accuracy"
# Metrics drawn in comparison.png (plus --metric).
COMPARED = (REWARD, ACCURACY)
# Parameters that differ between runs without being a choice (never shown as swept).
NOT_SWEPT = frozenset({"run.dry_run", "run.progress", "run.resume", "tracker.uri",
                       "tracker.flush_every_s"})


@dataclass
class Row:
    # Run name (MLflow run name, else the job dir's name).
    name: str
    # MLflow run id; None for a job known only from its summary.json.
    run_id: str | None
    # FINISHED | FAILED | KILLED | RUNNING (no end recorded).
    status: str
    # The run's config values: MLflow params, else its overrides.
    values: dict[str, str]
    final_reward: float | None = None
    final_accuracy: float | None = None
    best_accuracy: float | None = None
    # Final value of the --metric column.
    metric: float | None = None
    steps: int | None = None
    wall_s: float | None = None
    # The run dir, when known.
    run_dir: str | None = None
    # {metric: [(step, value)]} for the comparison plot.
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    # Why training ended before train.steps: early_stop | pruned (None = it did not).
    stopped: str | None = None


def _last(points: list[tuple[int, float]] | None) -> float | None:
    return points[-1][1] if points else None


def _best(points: list[tuple[int, float]] | None) -> float | None:
    finite = [v for _, v in points or [] if not math.isnan(v)]
    return max(finite) if finite else None


# ------------------------------------------------------------------------------ from MLflow


def row_from_run(client: "MlflowClient", run: "Run", metric: str | None) -> Row:
    names = list(dict.fromkeys([*COMPARED, *([metric] if metric else [])]))
    curves = fetch_history(client, run.info.run_id, names)
    info = run.info
    reward_steps = [s for s, _ in curves.get(REWARD, [])]
    tags = run.data.tags
    # summary.json's wall time and steps (tagged at the run's end), as the sweep-dir view
    # reads them; MLflow's start/end times also count process start-up and tracking.
    wall = _float(tags.get("rlexp.wall_s"))
    if wall is None and info.end_time and info.start_time:
        wall = (info.end_time - info.start_time) / 1000
    steps = _float(tags.get("rlexp.steps_done"))
    return Row(
        name=info.run_name or info.run_id[:8], run_id=info.run_id, status=info.status,
        values=dict(run.data.params), final_reward=_last(curves.get(REWARD)),
        final_accuracy=_last(curves.get(ACCURACY)), best_accuracy=_best(curves.get(ACCURACY)),
        metric=_last(curves.get(metric)) if metric else None,
        steps=int(steps) if steps is not None else max(reward_steps) if reward_steps else None,
        wall_s=wall, run_dir=tags.get("rlexp.run_dir"), curves=curves,
        stopped=tags.get("rlexp.stopped"))


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


def child_runs(client: "MlflowClient", parent_run_id: str) -> list["Run"]:
    parent = client.get_run(parent_run_id)
    return client.search_runs([parent.info.experiment_id],
                              filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
                              max_results=10000, order_by=["attributes.start_time ASC"])


def experiment_runs(client: "MlflowClient", name: str) -> list["Run"] | None:
    """Runs of an experiment that are not parents of others; None if it does not exist."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        return None
    runs = client.search_runs([exp.experiment_id], max_results=10000,
                              order_by=["attributes.start_time ASC"])
    # A sweep's parent run is no training run, with children or without (a sweep that
    # stopped before its jobs, a launcher dry run).
    parents = {r.data.tags.get("mlflow.parentRunId") for r in runs}
    return [r for r in runs if r.info.run_id not in parents
            and r.data.tags.get("rlexp.role") != "sweep"]


# ------------------------------------------------------------------------------ from run dirs


def _overrides(items: list[str]) -> dict[str, str]:
    out = {}
    for item in items:
        key, sep, value = str(item).lstrip("+~").partition("=")
        if sep:
            out[key] = value
    return out


def _accuracy(evaluation: Any) -> float | None:
    if not isinstance(evaluation, dict):
        return None
    value = evaluation.get(ACCURACY, evaluation.get("accuracy"))
    return float(value) if isinstance(value, (int, float)) else None


def row_from_summary(path: Path) -> Row | None:
    try:
        s = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(s, dict):
        return None
    before, after = _accuracy(s.get("eval_before")), _accuracy(s.get("eval_after"))
    known = [a for a in (before, after) if a is not None]
    # The loop's summary: train_final = the metrics of the last training step.
    final = s.get("train_final") if isinstance(s.get("train_final"), dict) else {}
    reward = final.get(REWARD)
    return Row(
        name=str(s.get("name") or path.parent.name), run_id=s.get("mlflow_run_id"),
        status=str(s.get("status") or "RUNNING"), values=_overrides(s.get("overrides") or []),
        final_reward=float(reward) if isinstance(reward, (int, float)) else None,
        final_accuracy=after, best_accuracy=max(known) if known else None,
        steps=s.get("steps_done"), wall_s=s.get("wall_s"), run_dir=str(path.parent),
        stopped=str(s["stop_reason"]).split(":", 1)[0] if s.get("stop_reason") else None)


def summary_rows(sweep_dir: Path) -> list[Row]:
    """Rows of the jobs under a sweep dir (their summary.json files), in path order."""
    rows = []
    for path in sorted(Path(sweep_dir).glob("**/summary.json")):
        if path.parent != Path(sweep_dir):
            row = row_from_summary(path)
            if row is not None:
                rows.append(row)
    return rows


def merge(tracked: list[Row], jobs: list[Row]) -> list[Row]:
    """MLflow rows completed by the jobs' summaries (exact steps, wall time, status)."""
    by_id = {r.run_id: r for r in tracked}
    # A job whose store was down at its end has no run id in summary.json (sync made the
    # run later): its run dir still matches.
    by_dir = {str(Path(r.run_dir).resolve()): r for r in tracked if r.run_dir}
    out = list(tracked)
    for job in jobs:
        row = by_id.get(job.run_id) if job.run_id else None
        if row is None and job.run_dir:
            row = by_dir.get(str(Path(job.run_dir).resolve()))
        if row is None:
            out.append(job)
            continue
        row.steps = job.steps if job.steps is not None else row.steps
        row.wall_s = job.wall_s if job.wall_s is not None else row.wall_s
        row.status = job.status if row.status == "RUNNING" else row.status
        row.run_dir = job.run_dir
        row.stopped = row.stopped or job.stopped
    return out


# ------------------------------------------------------------------------------ the table


def swept_keys(rows: list[Row]) -> list[str]:
    """Config keys whose value differs between the rows: what the sweep varied."""
    keys = sorted({k for r in rows for k in r.values} - NOT_SWEPT)
    # Distinct values among the rows that have the key (a job known only by its overrides
    # lacks the keys it did not override).
    return [k for k in keys if len({r.values[k] for r in rows if k in r.values}) > 1]


def rank(rows: list[Row], metric: str | None, ascending: bool = False) -> list[Row]:
    def key(row: Row) -> tuple[bool, float]:
        value = row.metric if metric else row.final_accuracy
        missing = value is None or math.isnan(value)
        return missing, (0.0 if missing else (value if ascending else -value))

    return sorted(rows, key=key)


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


def table(rows: list[Row], metric: str | None) -> tuple[list[str], list[list[str]]]:
    swept = swept_keys(rows)
    header = ["run", *swept, "final reward", "final acc", "best acc",
              *([f"final {metric}"] if metric else []), "steps", "wall s", "status"]
    body = [[r.name, *(r.values.get(k, "-") for k in swept), _fmt(r.final_reward),
             _fmt(r.final_accuracy), _fmt(r.best_accuracy),
             *([_fmt(r.metric)] if metric else []), _fmt(r.steps),
             _fmt(round(r.wall_s, 1) if r.wall_s is not None else None),
             f"{r.status} ({r.stopped})" if r.stopped else r.status]
            for r in rows]
    return header, body


def to_text(header: list[str], body: list[list[str]]) -> str:
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    lines = ["  ".join(str(c).ljust(w) for c, w in zip(line, widths)).rstrip()
             for line in [header, ["-" * w for w in widths], *body]]
    return "\n".join(lines)


def to_markdown(header: list[str], body: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *map(line, body)]) + "\n"


def to_csv(header: list[str], body: list[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out).writerows([header, *body])
    return out.getvalue()


def short_keys(keys: list[str]) -> dict[str, str]:
    """Shortest dotted suffix of each key that no other key shares: 'beta', but
    'trainer_mesh.fsdp' and 'rollout_mesh.fsdp' (never two 'fsdp')."""
    out = {}
    for key in keys:
        parts = key.split(".")
        for n in range(1, len(parts) + 1):
            suffix = ".".join(parts[-n:])
            if not any(o != key and (o == suffix or o.endswith("." + suffix)) for o in keys):
                break
        out[key] = suffix
    return out


def label(row: Row, swept: list[str]) -> str:
    short = short_keys(swept)
    parts = [f"{short[k]}={row.values.get(k, '-')}" for k in swept]
    return ", ".join(parts) or row.name


def plot(rows: list[Row], metric: str | None, path: Path, title: str = "") -> bool:

    swept = swept_keys(rows)
    metrics = list(dict.fromkeys([*COMPARED, *([metric] if metric else [])]))
    return plot_compare([(label(r, swept), r.curves) for r in rows if r.curves], metrics,
                        path, title=title)
