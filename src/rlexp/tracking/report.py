"""Compare runs: `python -m rlexp.report <sweep dir | parent run id | experiment name>`.

A row per run, ranked by final eval accuracy or --metric; a row per seed group (runs differing
only in train.seed or the --over keys), --baseline first, with the others' paired differences.
The PNGs go to --out, else a new temporary directory: reading a sweep never changes its files."""

from __future__ import annotations

import re
import sys
import tempfile
from pathlib import Path

from rlexp.base.errors import OneLineParser, UserError, fail
from rlexp.base.files import read_json_object
from rlexp.base.redact import redact_text
from rlexp.tracking import PARENT_FILE, compare, parent_run_id, store, swept_keys
from rlexp.tracking.compare import Row

# mlflow (2.3 s) is imported when the report reads the store.

RUN_ID = re.compile(r"[0-9a-f]{32}")


def _client(uri: str, required: bool, key: str = "--uri"):
    """A client, or None when a sqlite store does not exist (never create one by reading) or,
    for a sweep dir (not required: its jobs' summary.json files are rows too), cannot be read."""
    path = store.sqlite_path(uri)
    if path is not None and not path.exists():
        if required:
            raise UserError(f"no MLflow store at {path} (use --uri or $MLFLOW_TRACKING_URI)")
        return None
    try:
        uri = store.unmasked(uri, key)
        store.check_readable(key, uri)
    except UserError as exc:
        if required:
            raise
        print(f"rlexp: warning: {redact_text(str(exc))}; the runs below come from their "
              "summary.json files", file=sys.stderr, flush=True)
        return None
    return store.client(uri)


def collect(target: str, uri: str | None, metric: str | None) -> list[Row]:
    """The rows to compare."""
    path = Path(target)
    what = "name a sweep dir, a parent run id or an experiment"
    if path.is_file():
        raise UserError(f"{target} is a file: {what}")
    if not path.exists() and ("/" in target or target.startswith(".")):
        raise UserError(f"no directory {target} ({what})")
    if path.is_dir():
        # the store the sweep's parent run lives in, unless --uri names one
        saved = (read_json_object(path / PARENT_FILE) or {}).get("uri")
        key = "--uri" if uri or saved is None else f"{path / PARENT_FILE}'s uri"
        uri = store.resolve_uri(uri) if uri or saved is None else saved
        parent = parent_run_id(path)
        client = _client(uri, required=False, key=key) if parent else None
        tracked = [compare.row_from_run(client, r, metric)
                   for r in compare.child_runs(client, parent)] if client else []
        rows = compare.merge(tracked, compare.summary_rows(path))
        if not rows:
            raise UserError(f"{path} holds no runs (no summary.json below it, no MLflow "
                            "parent run)")
        return rows
    uri = store.resolve_uri(uri)
    client = _client(uri, required=True)
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
    return [compare.row_from_run(client, r, metric) for r in runs]


def report(target: str, uri: str | None = None, metric: str | None = None,
           ascending: bool = False, over: list[str] | None = None,
           baseline: str | None = None, out: Path | None = None) -> tuple[str, Path | None]:
    """(the run table, group table and paired differences as text, comparison.png or None);
    its PNGs go to `out` (made if missing), else to a new temporary directory."""
    rows = collect(target, uri, metric)
    if metric:  # a metric these runs logged; a job known by its summary has its final value
        known = sorted({m for r in rows for m in r.finals} |
                       {m for r in rows for m, points in r.curves.items() if points})
        if metric not in known:
            raise UserError(f"--metric {metric!r} is no metric of these runs; they have: "
                            f"{', '.join(known) or 'none'}")
        for row in rows:
            if row.metric is None:
                row.metric = row.finals.get(metric)
    path = Path(target)
    # as the sweep declared them (swept_keys.json), else the params that differ between rows
    swept = (swept_keys(path) if path.is_dir() else None) or compare.swept_keys(rows)
    for key in over or []:
        if compare.resolve_key(key, swept) is None:
            raise UserError(f"--over {key!r} is not a key this sweep varies; it varies: "
                            f"{', '.join(swept) or 'nothing'}")
    groups, table, paired = compare.group_report(rows, swept, over, baseline, metric, ascending)
    rows = compare.rank(rows, metric, ascending)
    if out and Path(out).exists() and not Path(out).is_dir():
        raise UserError(f"--out {out} is a file: name a directory (made if missing)")
    out = Path(out) if out else Path(tempfile.mkdtemp(prefix="rlexp-report-"))
    out.mkdir(parents=True, exist_ok=True)
    drawn = compare.draw(rows, groups, swept, out, path.name or target, metric)
    text = [compare.to_text(*compare.table(rows, metric)), "",
            f"seed groups ({len(groups)}):", table]
    if paired:
        text += ["", paired]
    if "groups" in drawn:
        text += ["", f"group curves: {drawn['groups']}"]
    if "forest" in drawn:
        text += [f"paired differences: {drawn['forest']}"]
    return "\n".join(text), drawn.get("comparison")


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(prog="python -m rlexp.report", description=__doc__.split("\n")[0])
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
    parser.add_argument("--out", type=Path, metavar="DIR",
                        help="where the PNGs go (default: a new temporary directory)")
    args = parser.parse_args(argv)
    try:
        text, png = report(args.target, args.uri, args.metric, args.ascending, args.over,
                           args.baseline, args.out)
    except UserError as exc:
        fail(str(exc))
    except Exception as exc:  # the store failed mid-read (it was readable a moment before)
        if not type(exc).__module__.startswith(("mlflow", "sqlalchemy", "requests")):
            raise
        fail(f"the MLflow store failed while reading: {store.first_line(exc)}")
    print(text)
    print(f"curves: {png}" if png else "curves: none (no metric history)")


if __name__ == "__main__":
    main()
