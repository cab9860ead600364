"""The sweep's parent MLflow run, as a Hydra callback (conf/config.yaml: hydra.callbacks).

on_multirun_start creates (a rerun reopens) the parent run the jobs nest under, in <sweep
dir>/parent_run.json; on_multirun_end, else an atexit hook, gives it the sweep's comparison and
ends it (parent_status). Import-light: Hydra loads it for every run, mlflow only when used."""

from __future__ import annotations

import atexit
import re
import sys
import tempfile
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rlexp.base.errors import fail
from rlexp.base.events import Listener
from rlexp.base.files import read_json_object, write_json_atomic
from rlexp.base.lock import Busy, DirLock
from rlexp.base.redact import placeholders, redact_text, redact_uri
from rlexp.tracking import PARENT_FILE, SWEPT_FILE, compare, store
from rlexp.tracking.conventions import standard_tags, sweep_display_name, swept_keys
from rlexp.tracking.environment import git_commit
from rlexp.tracking.links import run_link, uri_option
from rlexp.tracking.listener import TERMINAL, clean_params, clean_tags, now_ms, warn
from rlexp.tracking.remote_jobs import tracker_uri

SUMMARY_CSV = "summary.csv"
SUMMARY_MD = "summary.md"
GROUPS_TABLE = "groups.json"


def parent_status(statuses: list[str], completed: bool) -> str:
    """FAILED if a child failed or never ended, the sweep stopped early or none ran; KILLED if
    one was preempted (a rerun resumes it); else FINISHED."""
    if not statuses or any(s not in ("FINISHED", "KILLED") for s in statuses):
        return "FAILED"
    if "KILLED" in statuses:
        return "KILLED"
    return "FINISHED" if completed else "FAILED"


def _metric_name(text: str) -> str:
    """A label as part of an MLflow metric name (letters, digits, _ - . : space only)."""
    return re.sub(r"[^\w.\- :]", ":", text.replace("=", ":"))


def publish_comparison(client: Any, parent_id: str, sweep_dir: Path, rows: list, title: str,
                       status: str, swept: list[str] | None = None) -> str:
    """summary.csv, summary.md and the PNGs in `sweep_dir` and the parent run, with the group
    table, the groups' mean curves, rlexp.group tags on the children (for MLflow's "Group by")
    and `status`. Returns the group table and paired lines."""
    from mlflow.entities import Metric

    swept = swept or compare.swept_keys(rows)
    groups, table, paired = compare.group_report(rows, swept)  # baseline first, then by acc
    ranked = compare.rank(rows, None)
    g_header, g_body = compare.group_table(groups)
    header, body = compare.table(ranked, None)
    paths = [sweep_dir / SUMMARY_CSV, sweep_dir / SUMMARY_MD]
    paths[0].write_text(compare.to_csv(header, body))
    paths[1].write_text(
        f"# {title}\n\n## Seed groups\n\n" + compare.to_markdown(g_header, g_body)
        + f"\n{compare.table_note(groups)}\n" + (f"\n```\n{paired}\n```\n" if paired else "")
        + "\n## Runs\n\n" + compare.to_markdown(header, body))
    paths += compare.draw(ranked, groups, swept, sweep_dir, title).values()
    for path in paths:
        client.log_artifact(parent_id, str(path))
    client.log_table(parent_id, {h: [row[i] for row in g_body] for i, h in enumerate(g_header)},
                     GROUPS_TABLE)
    now = now_ms()
    metrics = [Metric(f"mean/{_metric_name(g.label)}/{m}", mean, now, step)
               for g in groups for m in compare.GROUP_CURVES
               for step, mean, _, _ in g.curve(m)]
    for i in range(0, len(metrics), store.MAX_METRICS_PER_BATCH):
        client.log_batch(parent_id, metrics=metrics[i:i + store.MAX_METRICS_PER_BATCH])
    for group in groups:
        for row in group.rows:
            if row.run_id:
                client.set_tag(row.run_id, "rlexp.group", group.label)
    client.set_terminated(parent_id, status)
    return "\n".join(x for x in (table, paired) if x)


def parent_source_tags(sweep_dir: Path) -> dict[str, str]:
    """MLflow UI's Source, Created by, git commit and description (command, dir) of the parent."""
    tags = {k: v for k, v in standard_tags({}, {}).items() if not k.startswith("mlflow.note")}
    commit = git_commit()
    if commit:
        tags["mlflow.source.git.commit"] = commit
    # the command that started this process, as a user would type it again
    prog = "python -m rlexp" if Path(sys.argv[0]).parent.name == "rlexp" or \
        sys.argv[0].endswith("rlexp") else f"python {Path(sys.argv[0]).name}"
    command = redact_text(" ".join([prog, *sys.argv[1:]]))
    tags["mlflow.note.content"] = (f"`{command}`\n\nsweep dir: {sweep_dir}"
                                   f"\n\ngit: {commit or 'unknown'}")
    return tags


# Written by launchers that submit jobs elsewhere (xpk) and return at once.
REMOTE_FILE = "workloads.json"


class SweepCallback(Callback):
    def __init__(self) -> None:
        # {"run_id", "experiment_id", "uri"} of the parent run, once created.
        self.parent: dict[str, str] | None = None
        self.sweep_dir: Path | None = None
        self._closed = False
        # Held from on_multirun_start to on_multirun_end (rlexp.lock).
        self._dir_lock: Any = None
        # Keys the sweep varies (None = unknown), for the runs' MLflow names.
        self._swept: list[str] | None = None
        # The sweep's last line (runs, status, the parent's link), once closed: for a
        # launcher's own summary.
        self.end_line: str | None = None

    def on_multirun_start(self, config: DictConfig, **kwargs: Any) -> None:
        if OmegaConf.select(config, "hydra.launcher.dry_run", default=False):
            return  # a launcher dry run (xpk) prints what it would submit; it creates nothing
        sweep_dir = Path(str(config.hydra.sweep.dir))
        if not OmegaConf.select(config, "run.dry_run", default=False):
            # The same sweep already running would run every job twice in the same dirs: exit
            # 2 before any job starts (held until the sweep ends or the process dies).
            try:
                self._dir_lock = DirLock(sweep_dir).acquire()
            except Busy as exc:
                fail(str(exc))
        uri = tracker_uri(config)
        if uri is None:
            return
        self.sweep_dir = sweep_dir.resolve()
        self.sweep_dir.mkdir(parents=True, exist_ok=True)
        store.prepare_store(uri)  # before any job opens the store (migration race)
        experiment = OmegaConf.select(config, "tracker.experiment", default="rlexp")
        overrides = [str(o) for o in OmegaConf.select(config, "hydra.overrides.task",
                                                      default=[]) or []]
        params = OmegaConf.select(config, "hydra.sweeper.params", default=None)
        try:  # what the jobs vary (command-line sweeps and the sweeper's params)
            self._swept = swept_keys(overrides, OmegaConf.to_container(params) if params else None)
        except Exception:  # names are a nicety: jobs then fall back to their choices
            self._swept = None
        try:
            self.parent = self._open_parent(uri, experiment, overrides)
        except Exception as exc:  # never fatal: the jobs then log unnested runs
            warn(f"no MLflow parent run for the sweep ({store.first_line(exc)})")
            return
        write_json_atomic(self.sweep_dir / PARENT_FILE,
                          {**self.parent, "uri": placeholders(self.parent["uri"])})
        if self._swept is not None:  # for the jobs' MLflow run names ('beta=0.04,epsilon=0.2')
            write_json_atomic(self.sweep_dir / SWEPT_FILE, {"keys": self._swept})
        atexit.register(self.close, False)

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        self.close(True)
        if self.parent is None and self._dir_lock is not None:
            print_untracked_end(Path(str(config.hydra.sweep.dir)))
        if self._dir_lock is not None:
            self._dir_lock.release()

    def _open_parent(self, uri: str, experiment: str, overrides: list[str]) -> dict[str, str]:
        from mlflow.exceptions import MlflowException

        assert self.sweep_dir is not None
        client = store.client(uri)
        previous = read_json_object(self.sweep_dir / PARENT_FILE)
        if previous is not None and previous.get("uri") in (uri, redact_uri(uri),
                                                                  placeholders(uri)):
            previous["uri"] = uri  # parent_run.json keeps it with credentials masked
            try:  # the same sweep again: its jobs resume their runs under the same parent
                client.update_run(previous["run_id"], status="RUNNING")
                return previous
            except MlflowException:
                pass  # the parent was deleted: make a new one
        name = self.sweep_dir.name
        exp_id = store.experiment_id(client, experiment, uri)
        tags = clean_tags({"sweep": name, "rlexp.sweep_id": name,
                           "rlexp.sweep_dir": str(self.sweep_dir), "rlexp.role": "sweep",
                           "overrides": " ".join(overrides), "rlexp.dir_name": name,
                           **parent_source_tags(self.sweep_dir)})
        run = client.create_run(exp_id, run_name=sweep_display_name(
            overrides, self._swept, name), tags=tags)
        swept = dict(o.lstrip("+~").split("=", 1) for o in overrides if "=" in o)
        if swept:
            from mlflow.entities import Param

            params = list(clean_params(swept).items())[:100]
            client.log_batch(run.info.run_id, params=[Param(k, v) for k, v in params])
        return {"run_id": run.info.run_id, "experiment_id": exp_id, "uri": uri}

    def close(self, completed: bool) -> None:
        """Summary artifacts and final status of the parent (once; also from atexit)."""
        if self.parent is None or self.sweep_dir is None or self._closed:
            return
        self._closed = True
        try:
            client = store.client(self.parent["uri"])
            run_id = self.parent["run_id"]
            if (self.sweep_dir / REMOTE_FILE).exists():
                # jobs were submitted to a remote scheduler (xpk) and report as they run: the
                # parent stays RUNNING and the last child to end closes it (close_if_complete)
                print(f"rlexp: sweep {self.sweep_dir.name}: parent MLflow run {run_id} stays "
                      f"RUNNING until its jobs report (python -m rlexp.report {run_id}"
                      f"{uri_option(self.parent['uri'])})",
                      flush=True)
                return
            tracked = [compare.row_from_run(client, r, None)
                       for r in compare.child_runs(client, run_id)]
            rows = compare.merge(tracked, compare.summary_rows(self.sweep_dir))
            status = parent_status([r.status for r in rows], completed)
            text = publish_comparison(client, run_id, self.sweep_dir, rows,
                                      f"sweep {self.sweep_dir.name}", status, self._swept)
            # '4 runs FINISHED', or '1 of 2 runs FAILED' when not all ended with that status
            ended_so = sum(r.status == status or status == "FAILED" and r.status != "FINISHED"
                           for r in rows)
            some = f"{ended_so} of " if ended_so < len(rows) else ""
            uri = self.parent["uri"]
            link = run_link(uri, self.parent.get("experiment_id"), run_id, hint=False)
            # the store's UI command and the tables on lines of their own (terminal width)
            opener = "" if link.startswith("http") else \
                f"\n  open it with: python -m rlexp.ui{uri_option(uri)}"
            self.end_line = (f"rlexp: sweep {self.sweep_dir.name}: {some}{len(rows)} runs "
                             f"{status}; MLflow {link}{opener}\n  tables: "
                             f"{self.sweep_dir / SUMMARY_MD}")
            print(f"{text}\n{self.end_line}", flush=True)
        except Exception as exc:  # never fatal
            warn(f"could not close the sweep's MLflow parent run ({store.first_line(exc)})")


def print_untracked_end(sweep_dir: Path) -> None:
    """A sweep with tracker=none ends with the same table from its jobs' summary.json."""
    try:
        rows = compare.summary_rows(sweep_dir)
        if not rows:
            return
        from rlexp.tracking import swept_keys as declared

        _, table, paired = compare.group_report(rows, declared(sweep_dir)
                                                or compare.swept_keys(rows))
        print("\n".join(x for x in (table, paired) if x) + f"\nrlexp: sweep {sweep_dir.name}: "
              f"{len(rows)} runs\n  compare them with: python -m rlexp.report {sweep_dir}",
              flush=True)
    except Exception as exc:  # never fatal
        warn(f"no group table for the sweep ({store.first_line(exc)})")


def close_if_complete(uri: str, parent_id: str, expected: int) -> str | None:
    """A remote sweep (RLEXP_SWEEP_JOBS=expected): each child, its run ended, gives the parent its
    summary and status once `expected` children ended; returns it, None while some still run."""
    client = store.client(uri)
    rows = [compare.row_from_run(client, r, None) for r in compare.child_runs(client, parent_id)]
    ended = [r.status for r in rows if r.status in TERMINAL]
    if len(ended) < expected:
        return None
    status = parent_status(ended, True)
    with tempfile.TemporaryDirectory() as tmp:
        publish_comparison(client, parent_id, Path(tmp), rows, f"sweep {parent_id}", status)
    return status


class RemoteParentCloser(Listener):
    """Listener of a remotely launched job (rlexp.tracking.remote_jobs env): after the job's
    own MLflow listener ended its run, close the sweep's parent if every job has reported."""

    def __init__(self, uri: str, parent_id: str, expected: int) -> None:
        self.uri, self.parent_id, self.expected = uri, parent_id, expected

    def on_run_end(self, status: str, summary: dict[str, Any]) -> None:
        done = close_if_complete(self.uri, self.parent_id, self.expected)
        if done is not None:
            print(f"rlexp: all {self.expected} jobs reported: sweep parent MLflow run "
                  f"{self.parent_id} {done}", flush=True)
