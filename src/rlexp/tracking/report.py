"""Compare runs: `python -m rlexp.report <sweep dir | parent run id | experiment name>`.

Prints one row per run, ranked by final eval accuracy or --metric; one row per seed group
(runs that differ only in train.seed, or the --over keys) with mean ±std [95% bootstrap CI];
each group's difference from --baseline (else the first group), paired by seed, with its CI
and a permutation p-value. Writes comparison.png and groups.png (mean curves, CI bands) in the
sweep dir, else ./comparison-<target>.png and ./groups-<target>.png.
"""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from rlexp.base.errors import UserError, fail
from rlexp.base.files import read_json_object
from rlexp.tracking import PARENT_FILE, compare, parent_run_id, store, swept_keys
from rlexp.tracking.compare import Row

# Imported inside functions, on purpose: mlflow (2.3 s) is imported when the report reads the
# store.

RUN_ID = re.compile(r"[0-9a-f]{32}")


def _client(uri: str, required: bool):
    """A client, or None when a sqlite store does not exist (never create one by reading)."""
    path = store.sqlite_path(uri)
    if path is not None and not path.exists():
        if required:
            raise UserError(f"no MLflow store at {path} (use --uri or $MLFLOW_TRACKING_URI)")
        return None
    return store.client(uri)


def collect(target: str, uri: str | None, metric: str | None) -> tuple[list[Row], Path]:
    """The rows to compare and where their PNG goes."""
    path = Path(target)
    if path.is_dir():
        # the store the sweep's parent run lives in, unless --uri names one
        saved = (read_json_object(path / PARENT_FILE) or {}).get("uri")
        uri = store.resolve_uri(uri) if uri or saved is None else saved
        parent = parent_run_id(path)
        client = _client(uri, required=False) if parent else None
        tracked = [compare.row_from_run(client, r, metric)
                   for r in compare.child_runs(client, parent)] if client else []
        rows = compare.merge(tracked, compare.summary_rows(path))
        if not rows:
            raise UserError(f"{path} holds no runs (no summary.json below it, no MLflow "
                            "parent run)")
        return rows, path / "comparison.png"
    uri = store.resolve_uri(uri)
    client = _client(uri, required=True)
    out = Path.cwd() / f"comparison-{store.slug(target)[:40]}.png"
    if RUN_ID.fullmatch(target):
        from mlflow.exceptions import MlflowException

        try:
            runs = compare.child_runs(client, target)
        except MlflowException:
            raise UserError(f"no MLflow run {target} in {uri}") from None
        if not runs:
            raise UserError(f"MLflow run {target} has no child runs")
    else:
        runs = compare.experiment_runs(client, target)
        if not runs:
            raise UserError(f"{target!r} is not a directory, a run id or an experiment with "
                            f"runs in {uri}")
    return [compare.row_from_run(client, r, metric) for r in runs], out


def group_report(rows: list[Row], swept: list[str] | None = None,
                 over: list[str] | None = None, baseline: str | None = None,
                 metric: str | None = None) -> tuple[list["compare.Group"], str, str]:
    """(groups, the group table with its note, the paired-difference lines): the text the
    sweep's last lines, its parent run's summary.md and this report share."""
    groups = compare.group_rows(rows, swept, over)
    base = compare.find_group(groups, baseline) if baseline else \
        compare.default_baseline(groups)
    table = compare.to_text(*compare.group_table(groups)) + "\n" + compare.table_note(groups)
    attr, name = ("metric", f"final {metric}") if metric else ("final_accuracy", "final acc")
    paired = "\n".join(compare.paired_lines(groups, base, attr, name)) if base else ""
    return groups, table, paired


def report(target: str, uri: str | None = None, metric: str | None = None,
           ascending: bool = False, over: list[str] | None = None,
           baseline: str | None = None) -> tuple[str, Path | None]:
    """(the run table, group table and paired differences as text, the PNG written or
    None); groups.png is written beside the PNG."""
    rows, png = collect(target, uri, metric)
    path = Path(target)
    # as the sweep declared them (swept_keys.json), else the params that differ between rows
    swept = (swept_keys(path) if path.is_dir() else None) or compare.swept_keys(rows)
    for key in over or []:
        if compare.resolve_key(key, swept) is None:
            raise UserError(f"--over {key!r} is not a key this sweep varies; it varies: "
                            f"{', '.join(swept) or 'nothing'}")
    # groups in the sweep's order (its first group is the default baseline), runs ranked
    groups, table, paired = group_report(rows, swept, over, baseline, metric)
    rows = compare.rank(rows, metric, ascending)
    title = path.name or target
    drawn = compare.plot(rows, metric, png, title=title, swept=swept, over=over)
    bands = png.with_name(png.name.replace("comparison", "groups", 1))
    text = [compare.to_text(*compare.table(rows, metric)), "",
            f"seed groups ({len(groups)}):", table]
    if paired:
        text += ["", paired]
    if compare.plot_groups(groups, bands, title=title):
        text += ["", f"group curves: {bands}"]
    return "\n".join(text), png if drawn else None


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rlexp.report",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("target", help="a sweep dir, a parent MLflow run id or an experiment")
    parser.add_argument("--metric", help="rank by the final value of this metric "
                        "(e.g. eval/pass_at_k) and show it as a column")
    parser.add_argument("--ascending", action="store_true",
                        help="lower is better for the ranking (losses, times)")
    parser.add_argument("--uri", help="tracking URI (default: as for runs)")
    parser.add_argument("--over", action="append", metavar="KEY",
                        help="a key whose values are repeats, not choices: runs that differ "
                        "only in these keys form a group (default: train.seed; repeatable)")
    parser.add_argument("--baseline", metavar="KEY=VALUE",
                        help="the group the others are compared with, paired by seed (e.g. "
                        "'algo=grpo'; default: the first group)")
    args = parser.parse_args(argv)
    try:
        text, png = report(args.target, args.uri, args.metric, args.ascending, args.over,
                           args.baseline)
    except UserError as exc:
        fail(str(exc))
    print(text)
    print(f"curves: {png}" if png else "curves: none (no metric history)")


if __name__ == "__main__":
    main()
