"""Compare runs, a row per run and per seed group (seed_stats), for `python -m rlexp.report` and
the sweep's summary. Rows come from MLflow and, for a sweep dir, from the jobs' summary.json, so
jobs with tracker=none or an unreachable store still show."""

from __future__ import annotations

import csv
import io
import math
import textwrap
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable

import numpy as np

from rlexp.base.errors import UserError
from rlexp.base.files import read_json_object
from rlexp.config import naming
from rlexp.tracking import seed_stats
from rlexp.tracking.plots import group_colors, plot_bands, plot_compare, plot_forest
from rlexp.tracking.run import fetch_history

if TYPE_CHECKING:
    from mlflow import MlflowClient
    from mlflow.entities import Run

REWARD = "train/reward_mean"
ACCURACY = "eval/accuracy"
COMPARED = (REWARD, ACCURACY)  # metrics drawn in comparison.png (plus --metric)
# Parameters that differ between runs without being a choice (never shown as swept).
NOT_SWEPT = frozenset({"run.dry_run", "run.progress", "run.resume", "tracker.uri",
                       "tracker.flush_every_s"})
WIDTH = 100  # width of the text tables and lines (a terminal's, with room for a prefix)


@dataclass
class Row:
    name: str  # run name (MLflow run name, else the job dir's name)
    run_id: str | None  # MLflow run id; None for a job known only from its summary.json
    status: str  # FINISHED | FAILED | KILLED | RUNNING (no end recorded)
    values: dict[str, str]  # the run's config values: MLflow params, else its overrides
    final_reward: float | None = None
    final_accuracy: float | None = None
    best_accuracy: float | None = None  # best held-out accuracy after step 0 (no update yet)
    # Best train reward of a step (from its curve; None for a job known by its summary only).
    best_reward: float | None = None
    metric: float | None = None  # final value of the --metric column
    steps: int | None = None
    wall_s: float | None = None
    run_dir: str | None = None
    curves: dict[str, list[tuple[int, float]]] = field(default_factory=dict)
    stopped: str | None = None  # why training ended early: early_stop | pruned
    # The keys its sweep varies, as its sweep.* tags name them (empty: unknown).
    swept: list[str] = field(default_factory=list)
    # Last value of every metric it logged (what --metric may name).
    finals: dict[str, float] = field(default_factory=dict)


def _last(points: list[tuple[int, float]] | None) -> float | None:
    return points[-1][1] if points else None


def _best(points: list[tuple[int, float]] | None) -> float | None:
    finite = [v for s, v in points or [] if s > 0 and not math.isnan(v)]
    return max(finite) if finite else None


def row_from_run(client: "MlflowClient", run: "Run", metric: str | None) -> Row:
    names = list(dict.fromkeys([*COMPARED, *([metric] if metric else [])]))
    curves = fetch_history(client, run.info.run_id, names)
    info = run.info
    reward_steps = [s for s, _ in curves.get(REWARD, [])]
    tags = run.data.tags
    # summary.json's wall time and steps (tagged at the end): MLflow's times count start-up too.
    wall = _float(tags.get("rlexp.wall_s"))
    if wall is None and info.end_time and info.start_time:
        wall = (info.end_time - info.start_time) / 1000
    steps = _float(tags.get("rlexp.steps_done"))
    # The swept values as typed (tags sweep.<key>: 'algo' = 'gspo', a choice no param holds).
    swept = {k[len("sweep."):]: v for k, v in tags.items() if k.startswith("sweep.")}
    return Row(
        name=info.run_name or info.run_id[:8], run_id=info.run_id, status=info.status,
        values={**run.data.params, **swept}, final_reward=_last(curves.get(REWARD)),
        final_accuracy=_last(curves.get(ACCURACY)), best_accuracy=_best(curves.get(ACCURACY)),
        best_reward=_best(curves.get(REWARD)), metric=_last(curves.get(metric)) if metric else None,
        steps=int(steps) if steps is not None else max(reward_steps) if reward_steps else None,
        wall_s=wall, run_dir=tags.get("rlexp.run_dir"), curves=curves,
        stopped=tags.get("rlexp.stopped"), swept=sorted(swept), finals=dict(run.data.metrics))


def _float(text: str | None) -> float | None:
    try:
        return float(text) if text is not None else None
    except ValueError:
        return None


# rlexp.role of a sweep's parent run and of its group runs (a seed group's mean curves, made by
# the sweep's end): neither is a job, so no comparison, count or resume lists them.
ROLE_TAG, SWEEP_ROLE, GROUP_ROLE = "rlexp.role", "sweep", "group"
# A sweep job's number in its multirun (Hydra's job.num): the children's order, so the first
# group (the paired lines' baseline) is the sweep's first, not whichever job started first.
JOB_INDEX_TAG = "rlexp.job_index"


def nested_runs(client: "MlflowClient", parent_run_id: str) -> list["Run"]:
    """Every run under a parent: its jobs and its group runs."""
    parent = client.get_run(parent_run_id)
    return client.search_runs([parent.info.experiment_id],
                              filter_string=f"tags.`mlflow.parentRunId` = '{parent_run_id}'",
                              max_results=10000, order_by=["attributes.start_time ASC"])


def child_runs(client: "MlflowClient", parent_run_id: str) -> list["Run"]:
    """The parent's job runs (not its group runs), in the sweep's order (else by start time)."""
    runs = [r for r in nested_runs(client, parent_run_id)
            if r.data.tags.get(ROLE_TAG) != GROUP_ROLE]
    return sorted(runs, key=lambda r: int(r.data.tags.get(JOB_INDEX_TAG, "-1")))


def experiment_runs(client: "MlflowClient", name: str) -> list["Run"] | None:
    """Runs of an experiment that are not parents of others; None if it does not exist."""
    exp = client.get_experiment_by_name(name)
    if exp is None:
        return None
    runs = client.search_runs([exp.experiment_id], max_results=10000,
                              order_by=["attributes.start_time ASC"])
    # A sweep's parent is no training run, even childless (stopped early, a launcher dry run).
    parents = {r.data.tags.get("mlflow.parentRunId") for r in runs}
    return [r for r in runs if r.info.run_id not in parents
            and r.data.tags.get(ROLE_TAG) not in (SWEEP_ROLE, GROUP_ROLE)]


def row_from_summary(path: Path) -> Row | None:
    s = read_json_object(path)
    if s is None:
        return None
    final = s.get("train_final") if isinstance(s.get("train_final"), dict) else {}
    reward = final.get(REWARD)
    # eval_before is the step-0 model: never the best accuracy of training
    evaluation = s.get("eval_after") if isinstance(s.get("eval_after"), dict) else {}
    after = evaluation.get(ACCURACY, evaluation.get("accuracy"))
    after = float(after) if isinstance(after, (int, float)) else None
    finals = {k: float(v) for k, v in {**final, **evaluation}.items()
              if isinstance(v, (int, float))}
    return Row(
        name=str(s.get("name") or path.parent.name), run_id=s.get("mlflow_run_id"),
        status=str(s.get("status") or "RUNNING"),
        values=naming.override_values(s.get("overrides") or []),
        final_reward=float(reward) if isinstance(reward, (int, float)) else None,
        final_accuracy=after, best_accuracy=after, steps=s.get("steps_done"),
        wall_s=s.get("wall_s"), run_dir=str(path.parent), finals=finals,
        stopped=str(s["stop_reason"]).split(":", 1)[0] if s.get("stop_reason") else None)


def summary_rows(sweep_dir: Path) -> list[Row]:
    """Rows of the jobs under a sweep dir (their summary.json files), in path order."""
    rows = [row_from_summary(path) for path in sorted(Path(sweep_dir).glob("**/summary.json"))
            if path.parent != Path(sweep_dir)]
    return [row for row in rows if row is not None]


def merge(tracked: list[Row], jobs: list[Row]) -> list[Row]:
    """MLflow rows completed by the jobs' summaries (exact steps, wall time, status)."""
    by_id = {r.run_id: r for r in tracked}
    # A job whose store was down at its end has no run id in summary.json: its run dir matches.
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
        for key, value in job.values.items():  # the overrides as typed ('algo' = 'gspo')
            row.values.setdefault(key, value)
        for key, value in job.finals.items():
            row.finals.setdefault(key, value)
    return out


def swept_keys(rows: list[Row]) -> list[str]:
    """Config keys whose value differs between the rows, among those their sweep.* tags name if
    any (a group choice also changes its group's defaults); rows lacking a key do not count."""
    tagged = {k for r in rows for k in r.swept}
    keys = sorted(tagged or {k for r in rows for k in r.values} - NOT_SWEPT)
    return [k for k in keys if len({r.values[k] for r in rows if k in r.values}) > 1]


def _order(value: float | None, ascending: bool) -> tuple[bool, float]:
    """Sort key: best first, missing values last."""
    missing = value is None or math.isnan(value)
    return missing, (0.0 if missing else (value if ascending else -value))


def rank(rows: list[Row], metric: str | None, ascending: bool = False) -> list[Row]:
    return sorted(rows, key=lambda r: _order(r.metric if metric else r.final_accuracy, ascending))


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


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


def to_text(header: list[str], body: list[list[str]], width: int = WIDTH) -> str:
    """Aligned columns; past `width` the rest goes on in blocks repeating the first column."""
    widths = [max(len(str(x)) for x in col) for col in zip(header, *body)]
    blocks: list[list[int]] = [[]]
    for i in range(1, len(header)):
        used = sum(widths[j] + 2 for j in [0, *blocks[-1]])
        if blocks[-1] and used + widths[i] > width:
            blocks.append([])
        blocks[-1].append(i)
    lines = [header, ["-" * w for w in widths], *body]
    return "\n\n".join("\n".join("  ".join(str(line[j]).ljust(widths[j]) for j in [0, *block])
                                 .rstrip() for line in lines) for block in blocks)


def to_markdown(header: list[str], body: list[list[str]]) -> str:
    def line(cells: list[str]) -> str:
        return "| " + " | ".join(str(c).replace("|", "\\|") for c in cells) + " |"

    return "\n".join([line(header), line(["---"] * len(header)), *map(line, body)]) + "\n"


def to_csv(header: list[str], body: list[list[str]]) -> str:
    out = io.StringIO()
    csv.writer(out).writerows([header, *body])
    return out.getvalue()


def label(row: Row, swept: list[str]) -> str:
    """The run's swept values (naming.label), else its name."""
    return naming.label(row.values, swept) or row.name


def plot(rows: list[Row], metric: str | None, path: Path, title: str, swept: list[str],
         groups: list["Group"]) -> bool:
    """One line per run; a seed group's runs share its colour and differ in dashes."""
    metrics = list(dict.fromkeys([*COMPARED, *([metric] if metric else [])]))
    group_of = {id(r): g.label for g in groups for r in g.rows}
    lines = []
    seen: dict[str, int] = {}
    for row in rows:
        if not row.curves:
            continue
        text = label(row, swept)
        # two runs with the same swept values (a rerun) are still two legend entries
        seen[text] = seen.get(text, 0) + 1
        lines.append((text if seen[text] == 1 else f"{text} #{seen[text]}", row.curves,
                      group_of.get(id(row), "")))
    colors = {**group_colors([g.label for g in groups]), "": (0.5, 0.5, 0.5)}  # "": no group
    return plot_compare(lines, metrics, path, colors, title=title)


SEED_KEYS = ("train.seed",)  # runs differing only in these keys: one group
# The group table's metrics: (column, Row attribute).
GROUP_METRICS = (("final acc", "final_accuracy"), ("best acc", "best_accuracy"),
                 ("final reward", "final_reward"), ("best reward", "best_reward"))
# Curves averaged per group (band plot, the parent run's mean/<group>/<metric> series).
GROUP_CURVES = (ACCURACY, REWARD)
# Keys whose values are tasks: a configuration on several gets rliable's aggregates over them,
# as does one task from this many seeds on.
TASK_KEYS = ("dataset",)
MANY_SEEDS = 10
SEEDS_HINT = "train.seed=0,1,2"  # what the one-seed line asks for


@dataclass
class Group:
    label: str  # naming.label of the group's values ('gspo β=0.04'); 'all' when nothing else varies
    values: dict[str, str]  # the group's values of the keys that define it
    rows: list[Row]
    seeds: list[str]  # seed label ('seed=0') of each run, same order

    def finished(self) -> list[tuple[str, Row]]:
        """(seed, run) of the finished runs, one per seed: a seed that finished more than once
        (a rerun in the same experiment) counts by its last row (rows come in start or sweep
        order, jobs known only from their summary.json last), as the mean, the interval, the
        pairing and the curves all must."""
        return list({s: r for s, r in zip(self.seeds, self.rows) if r.status == "FINISHED"}.items())

    def repeated(self) -> list[str]:
        """The seeds that finished more than once (their earlier runs do not count)."""
        done = [s for s, r in zip(self.seeds, self.rows) if r.status == "FINISHED"]
        return sorted({s for s in done if done.count(s) > 1})

    def values_of(self, attr: str) -> dict[str, float]:
        """seed -> the finished runs' value of a Row attribute (finite ones)."""
        return {seed: float(v) for seed, row in self.finished()
                if isinstance(v := getattr(row, attr), (int, float)) and math.isfinite(v)}

    def stats(self, attr: str) -> seed_stats.Summary | None:
        values = self.values_of(attr)
        return seed_stats.summarize([values[s] for s in sorted(values)])

    def curve(self, metric: str) -> list[tuple[int, float, float, float]]:
        """(step, mean, CI low, CI high) at the steps every finished run of the group logged."""
        curves = [c for _, r in self.finished() if (c := dict(r.curves.get(metric) or []))]
        steps = sorted(set.intersection(*map(set, curves))) if curves else []
        if not steps:
            return []
        matrix = np.array([[c[s] for s in steps] for c in curves], dtype=float)
        _, low, high, _ = seed_stats.t_columns(matrix)
        return [(int(s), float(m), float(lo), float(hi))
                for s, m, lo, hi in zip(steps, matrix.mean(axis=0), low, high)]


def resolve_key(name: str, keys: list[str]) -> str | None:
    """A key as named: in full ('algo.beta'), last part ('beta') or short ('β'); None if not one."""
    name = name.lstrip("+~")
    if name in keys:
        return name
    hits = [k for k in keys if k.rsplit(".", 1)[-1] == name or naming.short_key(k) == name]
    return hits[0] if len(hits) == 1 else None


def group_rows(rows: list[Row], swept: list[str] | None = None,
               over: list[str] | None = None) -> list[Group]:
    """Rows differing only in the `over` keys (default: seed) as groups, by their first run."""
    swept = swept_keys(rows) if swept is None else list(swept)
    over_keys = [resolve_key(k, swept) or k for k in (over or SEED_KEYS)]
    defining = [k for k in swept if k not in over_keys]
    groups: dict[tuple, Group] = {}
    for row in rows:
        values = {k: row.values[k] for k in defining if k in row.values}
        group = groups.setdefault(tuple(sorted(values.items())),
                                  Group(naming.label(values, defining) or "all", values, [], []))
        group.rows.append(row)
        group.seeds.append(naming.label(row.values, over_keys) or row.name)
    return list(groups.values())


def find_group(groups: list[Group], spec: str) -> Group:
    """The group a --baseline names: 'algo=grpo', 'beta=0', 'grpo' (its label)."""
    key, sep, value = spec.partition("=")

    def named(group: Group) -> bool:
        if not sep:
            return group.label == spec
        full = resolve_key(key.strip(), list(group.values))
        return full is not None and (naming.short_value(group.values[full])
                                     == naming.short_value(value.strip()))

    hits = [g for g in groups if named(g)]
    if len(hits) != 1:
        choices = ", ".join(repr(g.label) for g in groups)
        what = "matches no group" if not hits else f"matches {len(hits)} groups"
        raise UserError(f"--baseline {spec!r} {what}; groups: {choices} (name one by a "
                        "swept value, e.g. 'algo=grpo', or by its label)")
    return hits[0]


def _cells(summary: seed_stats.Summary | None, split: bool) -> list[str]:
    """'mean ±std [low, high]', or with `split` the interval in a cell of its own."""
    if summary is None or summary.n < 2:
        mean = "-" if summary is None else f"{summary.mean:.3f}"
        return [mean, "-"] if split else [mean]
    cells = [f"{summary.mean:.3f} ±{summary.std:.3f}", f"[{summary.low:.3f}, {summary.high:.3f}]"]
    return cells if split else [" ".join(cells)]


def group_table(groups: list[Group], metrics: tuple[tuple[str, str], ...] = GROUP_METRICS,
                split: bool = False) -> tuple[list[str], list[list[str]]]:
    """One row per group: n (finished runs), per metric mean ±std [95% CI] (`split`: CI apart)."""
    metrics = tuple((name, attr) for name, attr in metrics
                    if any(g.values_of(attr) for g in groups))
    header = ["group", "n", *(c for name, _ in metrics
                              for c in ([name, "95% CI"] if split else [name]))]
    body = []
    for group in groups:
        finished = len(group.finished())
        unfinished = sum(r.status != "FINISHED" for r in group.rows)
        earlier = len(group.rows) - finished - unfinished  # superseded reruns of a seed
        n = str(finished) + "".join(f" (+{k} {what})" for k, what in
                                    ((unfinished, "not finished"),
                                     (earlier, "earlier run" + "s" * (earlier > 1)))
                                    if k)
        body.append([group.label, n, *(c for _, attr in metrics
                                       for c in _cells(group.stats(attr), split))])
    return header, body


def table_note(groups: list[Group]) -> str:
    seeds = sorted({s for g in groups for s in g.seeds})
    shown = ", ".join(seeds[:8]) + (f", +{len(seeds) - 8}" if len(seeds) > 8 else "")
    repeated = [f"{g.label}: {', '.join(g.repeated())}" for g in groups if g.repeated()]
    return (f"mean ±std [{seed_stats.CI_NAME}] of each group's finished runs ({shown})"
            + (f"; a seed that finished more than once counts by its latest run "
               f"({'; '.join(repeated)})" if repeated else ""))


def wrap(line: str) -> str:
    """A line of text folded at WIDTH, its continuation indented."""
    return textwrap.fill(line, WIDTH, subsequent_indent="  ", break_long_words=False,
                         break_on_hyphens=False)


def _p(p: float) -> str:
    return f"{p:.2g}" if p >= 1e-3 else "< 0.001"


def pairs(groups: list[Group], baseline: Group, attr: str
          ) -> list[tuple[Group, seed_stats.Paired | None]]:
    """Each other group's paired-by-seed difference from the baseline, Holm-adjusted p-values."""
    base = baseline.values_of(attr)
    others = [g for g in groups if g is not baseline]
    found = [seed_stats.paired_difference(base, g.values_of(attr)) for g in others]
    adjusted = iter(seed_stats.with_holm([p for p in found if p is not None]))
    return [(g, None if p is None else next(adjusted)) for g, p in zip(others, found)]


def paired_lines(groups: list[Group], baseline: Group, attr: str = "final_accuracy",
                 name: str = "final acc") -> list[str]:
    """'final acc, gspo - grpo: +0.041 [-0.012, +0.090], p = 0.18, 5 seeds: <verdict>' a group."""
    found = pairs(groups, baseline, attr)
    if found and all(p is None or p.n < 2 for _, p in found):
        return [wrap(f"{name}: one seed per group, no spread to judge a difference by: add "
                     f"{SEEDS_HINT} to the sweep")]
    lines = []
    for group, pair in found:
        head = f"{name}, {group.label} - {baseline.label}: "
        if pair is None:
            lines.append(wrap(head + "no seed ran in both groups: nothing to pair"))
            continue
        ci = f" [{pair.low:+.3f}, {pair.high:+.3f}]" if pair.n > 1 else ""
        holm = f" (Holm {_p(pair.holm)})" if pair.holm is not None else ""
        p = f", p {'' if pair.p < 1e-3 else '= '}{_p(pair.p)}{holm}" if pair.n > 1 else ""
        lines.append(wrap(f"{head}{pair.mean:+.3f}{ci}{p}, {pair.n} seed"
                          f"{'s' if pair.n != 1 else ''}: {seed_stats.verdict(pair)}"))
    tested = max((p.comparisons for _, p in found if p is not None), default=1)
    note = (f"; Holm: p adjusted for the {tested} comparisons with {baseline.label}"
            if tested > 1 else "")
    return lines + [wrap(f"group - baseline over the seeds both ran [95% t-interval], p: "
                         f"paired t-test{note}")]


def answer(groups: list[Group], attr: str = "final_accuracy", name: str = "final acc") -> str:
    """Which groups are better (higher) or worse than the baseline, the first, in words, by the
    paired lines' own test: 'final acc: gspo is better than grpo'; '' for one group."""
    if len(groups) < 2:
        return ""
    base = groups[0]
    found = pairs(groups, base, attr)
    tested = [(g, p) for g, p in found if p is not None and p.n > 1]
    if not tested:
        return f"{name}: " + (f"one seed per group, no spread to judge a difference by: add "
                              f"{SEEDS_HINT}" if any(p for _, p in found)
                              else "no seed ran in both groups, nothing to pair")

    def said(labels: list[str], what: str) -> list[str]:
        verb = "is" if len(labels) == 1 else "are"
        return [f"{', '.join(labels)} {verb} {what} {base.label}"] if labels else []

    better = [g.label for g, p in tested if seed_stats.beyond_noise(p) and p.mean > 0]
    worse = [g.label for g, p in tested if seed_stats.beyond_noise(p) and p.mean < 0]
    same = [g.label for g, p in tested if not seed_stats.beyond_noise(p)]
    return f"{name}: " + "; ".join(said(better, "better than") + said(worse, "worse than")
                                   + said(same, "not distinguishable from"))


def groups_markdown(groups: list[Group], paired: str,
                    metrics: tuple[tuple[str, str], ...] = GROUP_METRICS) -> str:
    """The groups in Markdown (the parent run's Overview, summary.md): the answer in words, the
    group table (intervals in columns of their own) and its note, the paired lines as printed."""
    said = answer(groups)
    return ((f"**{said}**\n\n" if said else "") + to_markdown(*group_table(groups, metrics, True))
            + f"\n{table_note(groups)}\n" + (f"\n```\n{paired}\n```\n" if paired else ""))


def aggregate_lines(groups: list[Group], baseline: Group | None, attr: str = "final_accuracy",
                    name: str = "final acc") -> list[str]:
    """rliable's aggregates over several tasks (TASK_KEYS) or MANY_SEEDS seeds, else []: per
    configuration the IQM and P(X > baseline), each with a stratified-bootstrap CI."""
    def split(group: Group) -> tuple[str, str]:  # (configuration, task)
        keys = list(group.values)
        config = {k: v for k, v in group.values.items() if k not in TASK_KEYS}
        task = {k: v for k, v in group.values.items() if k in TASK_KEYS}
        return naming.label(config, keys) or "all", naming.label(task, keys) or "-"

    configs: dict[str, dict[str, dict[str, float]]] = {}
    for group in groups:
        config, task = split(group)
        configs.setdefault(config, {})[task] = group.values_of(attr)
    tasks = sorted(set.intersection(*(set(t) for t in configs.values()))) if configs else []
    seeds = sorted(set.intersection(*(set(v) for t in configs.values() for v in t.values()))
                   ) if configs else []
    if not tasks or not seeds or (len(tasks) < 2 and len(seeds) < MANY_SEEDS):
        return []
    scores = {c: np.array([[t[k][s] for k in tasks] for s in seeds]) for c, t in configs.items()}
    base = split(baseline)[0] if baseline is not None and len(scores) > 1 else None
    width = max(map(len, scores))
    what = f"{len(tasks)} tasks ({', '.join(tasks)})" if len(tasks) > 1 else "one task"
    lines = [wrap(f"{name} over {len(seeds)} seeds x {what}: IQM [95% stratified-bootstrap CI, "
                  f"{seed_stats.N_RESAMPLES} resamples]" + (", P(X > baseline)" if base else ""))]

    def estimate(statistic: Callable[..., np.ndarray], digits: int, *x: np.ndarray) -> str:
        low, high = seed_stats.stratified_bootstrap_ci(statistic, *x)
        return f"{float(statistic(*x)):.{digits}f} [{low:.{digits}f}, {high:.{digits}f}]"

    for config, x in scores.items():
        line = f"  {config.ljust(width)}  {estimate(seed_stats.iqm, 3, x)}"
        if base is not None and config != base:
            line += (f"  P({config} > {base}) = "
                     f"{estimate(seed_stats.probability_of_improvement, 2, x, scores[base])}")
        lines.append(wrap(line))
    return lines


def measure(metric: str | None) -> tuple[str, str]:
    """(Row attribute, column name) of what groups are compared by: --metric, else accuracy."""
    return ("metric", f"final {metric}") if metric else ("final_accuracy", "final acc")


def group_report(rows: list[Row], swept: list[str] | None = None,
                 over: list[str] | None = None, baseline: str | None = None,
                 metric: str | None = None, ascending: bool = False
                 ) -> tuple[list[Group], str, str]:
    """(groups, group table with note, paired and aggregate lines): shared by the sweep's end,
    summary.md and rlexp.report. Baseline first, then the others by mean, best first."""
    groups = group_rows(rows, swept, over)
    if baseline:
        base: Group | None = find_group(groups, baseline)
    else:
        base = groups[0] if len(groups) > 1 and any(g.finished() for g in groups[1:]) else None
    attr, name = measure(metric)
    groups = ([base] if base is not None else []) + sorted(
        (g for g in groups if g is not base),
        key=lambda g: _order(None if (s := g.stats(attr)) is None else s.mean, ascending))
    table = to_text(*group_table(groups)) + "\n" + wrap(table_note(groups))
    lines = paired_lines(groups, base, attr, name) if base else []
    lines += aggregate_lines(groups, base, attr, name)
    return groups, table, "\n".join(lines)


def band_title(groups: list[Group], title: str) -> str:
    """'<title>: mean over seeds, band = <CI>', or what one seed a group leaves to draw."""
    spread = any(len(g.finished()) > 1 for g in groups)
    what = (f"mean over seeds, band = {seed_stats.CI_NAME}" if spread
            else f"one seed per group (no band: add {SEEDS_HINT})")
    return f"{title}: {what}" if title else what


def draw(rows: list[Row], groups: list[Group], swept: list[str], folder: Path, title: str,
         metric: str | None = None) -> dict[str, Path]:
    """comparison.png, groups.png (mean curves, CI bands) and forest.png (paired differences from
    the first group, those with two seeds) in `folder`: those drawn, by name."""
    paths = {name: folder / f"{name}.png" for name in ("comparison", "groups", "forest")}
    colors = group_colors([g.label for g in groups])
    attr, name = measure(metric)
    bands = [(g.label, {m: g.curve(m) for m in GROUP_CURVES}) for g in groups]
    found = [(g.label, p.mean, p.low, p.high) for g, p in pairs(groups, groups[0], attr)
             if p is not None and p.n > 1] if groups else []
    base = groups[0].label if groups else ""
    drawn = {"comparison": plot(rows, metric, paths["comparison"], title, swept, groups),
             "groups": plot_bands(bands, list(GROUP_CURVES), paths["groups"], colors,
                                  title=band_title(groups, title)),
             "forest": plot_forest(found, colors, paths["forest"], title=title,
                                   xlabel=f"{name}: group - {base} [{seed_stats.CI_NAME}]")}
    return {name: path for name, path in paths.items() if drawn[name]}
