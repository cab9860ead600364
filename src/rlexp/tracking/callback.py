"""The sweep's parent MLflow run, as a Hydra callback (conf/config.yaml: hydra.callbacks):
on_multirun_start creates (a rerun reopens) the parent run the jobs nest under, in <sweep
dir>/parent_run.json; on_multirun_end, else an atexit hook, gives it the sweep's comparison and ends
it (parent_status). Import-light: Hydra loads it for every run, mlflow only when used."""

from __future__ import annotations

import atexit
import contextlib
import math
import sys
import tempfile
from pathlib import Path
from typing import Any
from urllib.parse import quote

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from rlexp.base.errors import fail
from rlexp.base.events import Listener
from rlexp.base.files import read_json_object, write_json_atomic
from rlexp.base.lock import Busy, DirLock
from rlexp.base.redact import placeholders, redact_text, redact_uri
from rlexp.tracking import PARENT_FILE, SWEPT_FILE, compare, seed_stats, store
from rlexp.tracking.conventions import standard_tags, sweep_display_name, swept_keys
from rlexp.tracking.environment import git_commit
from rlexp.tracking.links import TRAINING_VIEW, run_link, uri_option
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
    return "KILLED" if "KILLED" in statuses else "FINISHED" if completed else "FAILED"


# Where the note a parent run was made with (command, sweep dir, git) starts on its Overview: the
# comparison goes above it, and a rerun replaces only that.
SOURCE_HEADING = "#### Command"
NOTE_TAG = "mlflow.note.content"
# The group table's metrics on the Overview (summary.md has them all).
OVERVIEW_METRICS = tuple(m for m in compare.GROUP_METRICS if m[1] in ("final_accuracy",
                                                                       "final_reward"))


def publish_comparison(client: Any, parent_id: str, sweep_dir: Path, rows: list, title: str,
                       status: str, swept: list[str] | None = None) -> str:
    """summary.csv, summary.md and the PNGs in `sweep_dir` and the parent run; the group table and
    the answer on its Overview, a run per group, rlexp.group tags on the children (MLflow's "Group
    by") and `status`. Returns the group table and paired lines."""
    try:
        return _publish(client, parent_id, sweep_dir, rows, title, swept)
    finally:  # a failed table or chart still ends the parent (not RUNNING for ever)
        client.set_terminated(parent_id, status)


def _publish(client: Any, parent_id: str, sweep_dir: Path, rows: list, title: str,
             swept: list[str] | None) -> str:
    swept = swept or compare.swept_keys(rows)
    groups, table, paired = compare.group_report(rows, swept)  # baseline first, then by acc
    ranked = compare.rank(rows, None)
    header, body = compare.table(ranked, None)
    paths = [sweep_dir / SUMMARY_CSV, sweep_dir / SUMMARY_MD]
    paths[0].write_text(compare.to_csv(header, body))
    paths[1].write_text(f"# {title}\n\n## Seed groups\n\n{compare.groups_markdown(groups, paired)}"
                        "\n## Runs\n\n" + compare.to_markdown(header, body))
    paths += compare.draw(ranked, groups, swept, sweep_dir, title).values()
    for path in paths:
        client.log_artifact(parent_id, str(path))
    g_header, g_body = compare.group_table(groups)
    client.log_table(parent_id, {h: [row[i] for row in g_body] for i, h in enumerate(g_header)},
                     GROUPS_TABLE)
    # the Overview: the answer, final acc and reward by group, the chart view of the group runs
    parent = client.get_run(parent_id)
    markdown = compare.groups_markdown(groups, paired, OVERVIEW_METRICS)
    if publish_group_runs(client, parent, groups):
        markdown += (f"\n[group curves]({group_chart_link(parent)}): a run per group, its mean "
                     f"over seeds under the children's metric names, its {seed_stats.CI_NAME} as "
                     "`<metric>_lo` and `<metric>_hi`: one chart per metric draws every group\n")
    source = parent.data.tags.get(NOTE_TAG, "")
    source = source[source.find(SOURCE_HEADING):] if SOURCE_HEADING in source else source
    client.set_tag(parent_id, NOTE_TAG, f"{markdown}\n{source}")
    from mlflow.exceptions import MlflowException

    for row, label in ((r, g.label) for g in groups for r in g.rows if r.run_id):
        with contextlib.suppress(MlflowException):  # a child deleted in the UI meanwhile
            client.set_tag(row.run_id, "rlexp.group", label)
    return "\n".join(x for x in (table, paired) if x)


def group_chart_link(parent: Any) -> str:
    """The experiment's chart view (MLflow 3.17 server/js: compareRunsMode, searchFilter) on the
    parent's group runs, best first: sorted by anything but date, it lists them unnested, so
    their curves show without expanding the parent."""
    search = (f"tags.`{compare.ROLE_TAG}` = '{compare.GROUP_ROLE}' and "
              f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'")
    return (f"#/experiments/{parent.info.experiment_id}/runs?{TRAINING_VIEW}&compareRunsMode=CHART"
            f"&searchFilter={quote(search)}&orderByKey={quote(f'metrics.`{compare.ACCURACY}`')}"
            "&orderByAsc=false")


def publish_group_runs(client: Any, parent: Any, groups: list[compare.Group]) -> list[str]:
    """A run per seed group under the parent (rlexp.role=group): its mean curve under the children's
    metric names, its t-interval as <metric>_lo and <metric>_hi, so MLflow's chart view draws the
    groups in one chart per metric. Made for two groups or more, one with two seeds (else the runs
    are the groups' curves); a rerun replaces them. Returns their run ids."""
    from mlflow.entities import Metric
    for old in compare.nested_runs(client, parent.info.run_id):
        if old.data.tags.get(compare.ROLE_TAG) == compare.GROUP_ROLE:
            client.delete_run(old.info.run_id)
    if len(groups) < 2 or all(len(g.finished()) < 2 for g in groups):
        return []
    now = now_ms()
    made = []
    for group in groups:
        metrics = [Metric(f"{m}{suffix}", value, now, step) for m in compare.GROUP_CURVES
                   for step, *values in group.curve(m)
                   for suffix, value in zip(("", "_lo", "_hi"), values) if math.isfinite(value)]
        if not metrics:
            continue
        run = client.create_run(parent.info.experiment_id,
                                run_name=f"{group.label}: mean of {len(group.finished())}",
                                tags={"mlflow.parentRunId": parent.info.run_id,
                                      compare.ROLE_TAG: compare.GROUP_ROLE})
        for i in range(0, len(metrics), store.MAX_METRICS_PER_BATCH):
            client.log_batch(run.info.run_id, metrics=metrics[i:i + store.MAX_METRICS_PER_BATCH])
        client.set_terminated(run.info.run_id, "FINISHED")
        made.append(run.info.run_id)
    return made


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
    tags[NOTE_TAG] = (f"{SOURCE_HEADING}\n\n`{command}`\n\nsweep dir: {sweep_dir}"
                      f"\n\ngit: {commit or 'unknown'}")
    return tags


REMOTE_FILE = "workloads.json"  # written by launchers that submit jobs elsewhere (xpk)
# Written when the sweep could not end its parent run (the store down at its end): whether the
# sweep ran to its end, for `python -m rlexp.sync SWEEP_DIR`, which ends the parent later.
UNCLOSED_FILE = "parent_unclosed.json"


class SweepCallback(Callback):
    def __init__(self) -> None:
        # {"run_id", "experiment_id", "uri"} of the parent run, once created.
        self.parent: dict[str, str] | None = None
        self.sweep_dir: Path | None = None
        self._closed = False
        self._dir_lock: Any = None  # held from on_multirun_start to on_multirun_end (rlexp.lock)
        self._swept: list[str] | None = None  # keys the sweep varies (None: unknown), for run names
        # The sweep's last line (runs, status, parent link) once closed, for a launcher's summary.
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
                           "rlexp.sweep_dir": str(self.sweep_dir),
                           compare.ROLE_TAG: compare.SWEEP_ROLE,
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
                # jobs submitted elsewhere (xpk) report as they run: the last closes the parent
                print(f"rlexp: sweep {self.sweep_dir.name}: parent MLflow run {run_id} stays "
                      f"RUNNING until its jobs report (python -m rlexp.report {run_id}"
                      f"{uri_option(self.parent['uri'])})", flush=True)
                return
            text, runs = end_parent(client, run_id, self.sweep_dir, self._swept, completed)
            uri = self.parent["uri"]
            link = run_link(uri, self.parent.get("experiment_id"), run_id, hint=False)
            # the store's UI command and the tables on lines of their own (terminal width)
            opener = "" if link.startswith("http") else \
                f"\n  open it with: python -m rlexp.ui{uri_option(uri)}"
            self.end_line = (f"rlexp: sweep {self.sweep_dir.name}: {runs}; MLflow {link}"
                             f"{opener}\n  tables: {self.sweep_dir / SUMMARY_MD}")
            print(f"{text}\n{self.end_line}", flush=True)
            (self.sweep_dir / UNCLOSED_FILE).unlink(missing_ok=True)
        except Exception as exc:  # never fatal
            with contextlib.suppress(OSError):
                write_json_atomic(self.sweep_dir / UNCLOSED_FILE, {"completed": completed})
            warn(f"could not close the sweep's MLflow parent run ({store.first_line(exc)}); "
                 f"once the store is back: python -m rlexp.sync {self.sweep_dir}")


def end_parent(client: Any, run_id: str, sweep_dir: Path, swept: list[str] | None,
               completed: bool) -> tuple[str, str]:
    """The sweep's comparison published on its parent run, which ends (parent_status): the
    group table and paired lines, and how its runs ended ('4 runs FINISHED', '1 of 2 runs
    FAILED' when not all ended with the parent's status, '2 runs FINISHED, the sweep stopped
    before its end: FAILED')."""
    tracked = [compare.row_from_run(client, r, None) for r in compare.child_runs(client, run_id)]
    rows = compare.merge(tracked, compare.summary_rows(sweep_dir))
    status = parent_status([r.status for r in rows], completed)
    text = publish_comparison(client, run_id, sweep_dir, rows, f"sweep {sweep_dir.name}", status,
                              swept)
    ended_so = sum(r.status == status or status == "FAILED" and r.status != "FINISHED"
                   for r in rows)
    if rows and not ended_so:  # every run finished; the sweep itself did not reach its end
        runs = f"{len(rows)} run" + "s" * (len(rows) > 1)
        return text, f"{runs} FINISHED, the sweep stopped before its end: {status}"
    some = f"{ended_so} of " if ended_so < len(rows) else ""
    return text, f"{some}{len(rows)} runs {status}"


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
    """A remote job's listener: after its run ended, close the sweep's parent once all reported."""

    def __init__(self, uri: str, parent_id: str, expected: int) -> None:
        self.uri, self.parent_id, self.expected = uri, parent_id, expected

    def on_run_end(self, status: str, summary: dict[str, Any]) -> None:
        done = close_if_complete(self.uri, self.parent_id, self.expected)
        if done is not None:
            print(f"rlexp: all {self.expected} jobs reported: sweep parent MLflow run "
                  f"{self.parent_id} {done}", flush=True)
