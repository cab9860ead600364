"""Send what a run dir's spool still holds to MLflow: `python -m rlexp.sync <run dir>`.

After an unreachable store or a crash, unsent records wait in <run dir>/tracking_spool.jsonl.
Sending is idempotent: syncing twice, or a later resume, logs nothing twice. Metrics after the last
checkpoint are held back (a resume produces them again) unless --all. Damaged input never crashes
it: bad spool lines are skipped and counted, a damaged tracking.json is rebuilt (summary.json's run
id, or the store's run tagged with the dir; the gate from the newest checkpoint). A store it cannot
send to is named in one line: down (sync again once up), wrong (pass --uri), or failing a write for
good (fix that first); the spool keeps every record.

`python -m rlexp.sync <sweep dir>` syncs each of the sweep's run dirs, then ends the sweep's
parent run with its comparison if the sweep could not (its store was down at the sweep's end):
FINISHED only if the sweep ran to its end and every run finished (the callback's rule)."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from rlexp.base.errors import OneLineParser, UserError, fail
from rlexp.base.files import MULTIRUN_FILE, read_json_object
from rlexp.base.lock import Busy, DirLock, try_flock
from rlexp.base.redact import install_log_redaction, redact_uri, remember
from rlexp.base.summary import SUMMARY_FILE, read_summary, write_summary
from rlexp.config.naming import flatten
from rlexp.tracking import PARENT_FILE, parent_run_id, store, swept_keys
from rlexp.tracking.listener import clean_params, clean_tags, now_ms
from rlexp.tracking.run import ALWAYS, TrackedRun, record
from rlexp.tracking.spool import LINK_FILE, LOCK_FILE, SPOOL_FILE, Link

DEFAULT_EXPERIMENT = "rlexp"


def sync(run_dir: Path, send_all: bool = False, uri: str | None = None,
         new_run: bool = False, experiment: str | None = None) -> str:
    """Replay the spool of `run_dir`; returns a one-line account. Raises UserError."""
    run_dir = Path(run_dir)
    if not run_dir.is_dir():
        raise UserError(f"{run_dir} has no tracking.json (not a run dir)")
    if is_sweep_dir(run_dir):
        if new_run or experiment:
            raise UserError(f"{run_dir} is a sweep dir: --new-run and --experiment take one "
                            "of its run dirs")
        return sync_sweep(run_dir, send_all, uri)
    if not (run_dir / LINK_FILE).exists() and not (run_dir / SPOOL_FILE).exists():
        # said before the locks below are made: a mistyped dir is left as it was
        raise UserError(f"{run_dir} has no tracking.json (was it tracked with tracker=mlflow?)")
    try:
        dir_lock = DirLock(run_dir).acquire()  # a job starting now waits for us, not mixes in
    except Busy as exc:
        raise UserError(str(exc)) from None
    try:
        lock = try_flock(run_dir / LOCK_FILE)
        if lock is None:
            raise UserError(f"a live process is tracking {run_dir}; it sends its spool itself")
        with lock:
            return _sync(run_dir, send_all, uri, new_run, experiment)
    finally:
        dir_lock.release()


def is_sweep_dir(path: Path) -> bool:
    """A sweep's dir: Hydra's or the parent run's file (missing when the store was down as the
    sweep started), no run of its own."""
    return ((path / PARENT_FILE).is_file() or (path / MULTIRUN_FILE).is_file()) \
        and not (path / LINK_FILE).exists() and not (path / SPOOL_FILE).exists()


def sync_sweep(sweep_dir: Path, send_all: bool, uri: str | None) -> str:
    """Each job run dir of the sweep, then its parent run, if still RUNNING, ended with the
    sweep's comparison as the sweep would have (its store was down at the sweep's end)."""
    from mlflow.exceptions import MlflowException

    from rlexp.tracking.callback import REMOTE_FILE, UNCLOSED_FILE, end_parent

    try:
        sweep_lock = DirLock(sweep_dir).acquire()  # held by the sweep while it runs
    except Busy as exc:
        raise UserError(f"{exc}; the sweep ends its parent run itself") from None
    try:
        accounts, failed = [], []
        jobs = [job for job in sorted(sweep_dir.iterdir())
                if (job / LINK_FILE).exists() or (job / SPOOL_FILE).exists()]
        for job in jobs:  # each run on its own: one that cannot go holds back no other
            try:
                accounts.append(f"{job.name}: {sync(job, send_all, uri)}")
            except UserError as exc:
                failed.append(f"{job.name}: {exc}")
        if failed:
            raise UserError(f"sweep {sweep_dir.name}: {len(failed)} of {len(jobs)} runs not "
                            f"synced (first: {failed[0]}); its parent run is left as it is "
                            "until every run syncs")
        if not (sweep_dir / PARENT_FILE).exists():  # the store was down at the sweep's start
            return "\n".join([*accounts, f"sweep {sweep_dir.name}: no parent run (none was "
                                          "made: its runs are top-level)"])
        parent = read_json_object(sweep_dir / PARENT_FILE) or {}
        run_id = parent.get("run_id")
        if not isinstance(run_id, str) or not isinstance(parent.get("uri"), str):
            raise UserError(f"{sweep_dir / PARENT_FILE} is damaged (no run_id and uri)")
        parent_uri = store.resolve_uri(uri) if uri else \
            store.unmasked(parent["uri"], str(sweep_dir / PARENT_FILE))
        _check_store(parent_uri)
        client = store.client(parent_uri)
        try:
            status = client.get_run(run_id).info.status
        except MlflowException as exc:
            raise _store_error(parent_uri, exc) from None
        if (sweep_dir / REMOTE_FILE).exists():
            ended = f"parent run {run_id} {status} (its remote jobs end it as they report)"
        elif status != "RUNNING":
            ended = f"parent run {run_id} already {status}"
        else:
            unclosed = read_json_object(sweep_dir / UNCLOSED_FILE)
            # no note: the sweep's process died before its end (it did not complete)
            completed = bool(unclosed and unclosed.get("completed") is True)
            try:
                _, runs = end_parent(client, run_id, sweep_dir, swept_keys(sweep_dir), completed)
            except MlflowException as exc:
                raise _store_error(parent_uri, exc) from None
            (sweep_dir / UNCLOSED_FILE).unlink(missing_ok=True)
            ended = f"parent run {run_id} ended: {runs}"
    finally:
        sweep_lock.release()
    return "\n".join([*accounts, f"sweep {sweep_dir.name}: {ended} "
                                  f"({redact_uri(parent_uri)})"])


def _sync(run_dir: Path, send_all: bool, uri: str | None, new_run: bool,
          experiment: str | None) -> str:
    notes: list[str] = []
    link = Link.load(run_dir)
    if link is None:
        link = _rebuild_link(run_dir, uri, experiment, new_run, notes)
    elif uri:
        link.uri = store.resolve_uri(uri)  # the store moved (e.g. a server's new address)
    else:  # tracking.json keeps the URI with its credentials masked
        link.uri = store.unmasked(link.uri, str(run_dir / LINK_FILE))
    if experiment:
        link.experiment = experiment
    _check_store(link.uri)
    run = TrackedRun(run_dir, link)
    try:
        if run.skipped:
            notes.append(f"{run.skipped} damaged spool records skipped")
        if new_run:
            old = link.run_id
            link.run_id = link.experiment_id = None
            _add_start(run, run_dir, old)
            notes.append(f"new run (was {old or 'never created'})")
        # the last status said counts: a rerun's RUNNING after an earlier attempt's FAILED
        said = [r["status"] for r in run.records if r["kind"] == "status"]
        ended = bool(said) and said[-1] != "RUNNING"
        gate = ALWAYS if send_all or not link.gated else link.checkpoint_step
        try:
            status = _status(run, link.run_id) if link.run_id is not None else None
            if link.run_id is not None and status is None:
                raise UserError(f"MLflow run {link.run_id} is not in the store "
                                f"{redact_uri(link.uri)} (deleted?); deliver the spool into a "
                                f"new run with: python -m rlexp.sync {run_dir} --new-run")
            # No process holds the lock, so nothing is running: the run crashed (a run the
            # store never had is made by this flush, RUNNING: it ends KILLED too).
            if not ended and (status == "RUNNING" or link.run_id is None):
                run.add(record("status", status="KILLED", t=None))
            sent = run.flush(gate)
        except UserError:
            raise
        except Exception as exc:
            raise _store_error(link.uri, exc) from None
        link.save(run_dir)
        if _fill_summary_run_id(run, run_dir):
            notes.append(f"{SUMMARY_FILE} mlflow_run_id set")
    finally:
        run.close()
    if run.dropped:
        notes.append(f"{len(run.dropped)} record(s) the store cannot take left out (first: "
                     f"{run.dropped[0]})")
    held = sum(r["kind"] == "metrics" for r in run.records)
    if held:
        notes.append(f"{held} metric records after the last checkpoint (step "
                     f"{link.checkpoint_step}) held back for a resume (--all sends them)")
    note = "".join(f"; {n}" for n in notes)
    return f"sent {sent} records to MLflow run {link.run_id} ({redact_uri(link.uri)}){note}"


def _check_store(uri: str) -> None:
    """A wrong or down server is said before sending, not after retries; sqlite made if missing."""
    if store.sqlite_path(uri) is not None:
        return
    state = store.classify(uri)
    if store.is_wrong(state) or store.is_down(state):
        raise _store_error(uri, None, state)


def _store_error(uri: str, exc: BaseException | None, state: str | None = None) -> UserError:
    """Sending to `uri` failed: the store is down, wrong, or refused this write for good."""
    shown = redact_uri(uri)
    if exc is not None and not store.is_outage(exc):
        return UserError(f"the MLflow store {shown} failed a write: {store.first_line(exc)}; "
                         f"not an outage (the records stay in the spool): fix that, then run "
                         f"this command again")
    state = state or store.classify(uri, cache=False)
    why = state.split(": ", 1)[-1]
    if store.is_wrong(state):
        return UserError(f"could not reach the MLflow store {shown}: the store is wrong: {why}; "
                         f"nothing was sent (the records stay in the spool): pass the right "
                         f"store with --uri URI")
    if store.is_down(state):
        return UserError(f"could not reach the MLflow store {shown}: the store is down: {why}; "
                         f"the records stay in the spool: run this command again once it is up")
    return UserError(f"could not reach the MLflow store {shown}: "
                     f"{store.first_line(exc) if exc is not None else state}")


def _status(run: TrackedRun, run_id: str) -> str | None:
    """The run's status in the store; None when the store does not have it."""
    from mlflow.exceptions import MlflowException
    try:
        return run.client.get_run(run_id).info.status
    except MlflowException as exc:
        if exc.error_code == "RESOURCE_DOES_NOT_EXIST":
            return None
        raise


def latest_checkpoint(run_dir: Path) -> int:
    """Newest committed checkpoint step under run_dir/checkpoints (-1 when none)."""
    folder = run_dir / "checkpoints"
    steps = [int(p.name) for p in folder.iterdir() if p.name.isdigit()] if folder.is_dir() else []
    return max(steps, default=-1)


def _rebuild_link(run_dir: Path, uri: str | None, experiment: str | None, new_run: bool,
                  notes: list[str]) -> Link:
    """tracking.json is missing or damaged: rebuild it from what else the run dir holds."""
    what = "damaged" if Link.damaged(run_dir) else "missing"  # sync() saw a spool then
    uri = uri or os.environ.get("MLFLOW_TRACKING_URI")
    if not uri:
        raise UserError(f"{run_dir}/{LINK_FILE} is {what}: name the store with --uri URI "
                        f"(and --experiment NAME unless it is '{DEFAULT_EXPERIMENT}')")
    checkpoint = latest_checkpoint(run_dir)
    link = Link(uri=store.resolve_uri(uri), experiment=experiment or DEFAULT_EXPERIMENT,
                gated=checkpoint >= 0, checkpoint_step=checkpoint)
    if not new_run:
        hint = (read_summary(run_dir) or {}).get("mlflow_run_id")
        _check_store(link.uri)
        try:
            store.ensure_store(link.uri)
            link.run_id = store.find_run(store.client(link.uri), link.experiment, run_dir,
                                         hint if isinstance(hint, str) else None)
        except Exception as exc:
            raise _store_error(link.uri, exc) from None
        if link.run_id is None:
            raise UserError(f"{run_dir}/{LINK_FILE} is {what} and no MLflow run of this dir is "
                            f"in experiment '{link.experiment}' of {redact_uri(link.uri)}; "
                            f"--new-run delivers the spool into a new run")
    if (run_dir / LINK_FILE).exists():
        Link.set_aside(run_dir)
    notes.append(f"{LINK_FILE} was {what}: rebuilt")
    return link


def _add_start(run: TrackedRun, run_dir: Path, old_run_id: str | None) -> None:
    """A new run needs a start record and the params, which the spool may no longer hold
    (sent to the lost run): rebuild them from summary.json and Hydra's saved config."""
    summary = read_summary(run_dir) or {}
    if not any(r["kind"] == "start" for r in run.records):
        tags = {**(summary.get("choices") or {}), store.RUN_DIR_TAG: str(run_dir.resolve()),
                "rlexp.synced_from_run": old_run_id or "none",
                **_sweep_job_tags(run_dir, summary)}
        run.add(record("start", name=str(summary.get("name") or run_dir.name),
                       tags=clean_tags(tags), t=now_ms(), parent_run_id=_sweep_parent(run)))
    if not any(r["kind"] == "params" for r in run.records):
        params = _hydra_params(run_dir)
        if params:
            run.add(record("params", params=clean_params(params)))
    if summary and not any(r["kind"] == "json" for r in run.records):
        run.add(record("json", artifact_file=SUMMARY_FILE, data=summary))


def _sweep_job_tags(run_dir: Path, summary: dict[str, Any]) -> dict[str, str]:
    """A sweep job's tags besides its choices, as its lost run had them
    (rlexp.job.listeners.run_tags): its sweep, its index (the sweep's order in reports) and
    its swept values in full."""
    from rlexp.tracking.compare import JOB_INDEX_TAG
    from rlexp.tracking.conventions import swept_tags

    if not is_sweep_dir(run_dir.parent):
        return {}
    tags = {"sweep": run_dir.parent.name}
    try:
        num = OmegaConf.load(run_dir / ".hydra" / "hydra.yaml").hydra.job.num
        tags[JOB_INDEX_TAG] = str(int(num))
    except Exception:  # no or a damaged Hydra file: the run then sorts first among the jobs
        pass
    overrides = summary.get("overrides")
    if isinstance(overrides, list):
        tags.update(swept_tags(map(str, overrides), swept_keys(run_dir.parent)))
    return tags


def _sweep_parent(run: TrackedRun) -> str | None:
    """The parent run of the sweep whose job the run dir is, when the run's store still has
    it: the new run nests there (the sweep's report and comparison count it)."""
    from mlflow.exceptions import MlflowException

    parent = parent_run_id(run.run_dir.parent)
    if not isinstance(parent, str):
        return None
    try:
        return parent if run.client.get_run(parent).info.lifecycle_stage == "active" else None
    except MlflowException:  # not in this store (the old store is gone, or another one)
        return None


def _hydra_params(run_dir: Path) -> dict[str, Any]:
    try:
        config = OmegaConf.load(run_dir / ".hydra" / "config.yaml")
        return flatten(OmegaConf.to_container(config, resolve=False))
    except Exception:  # no or a damaged config file: the run gets no params, metrics still go
        return {}


def _fill_summary_run_id(run: TrackedRun, run_dir: Path) -> bool:
    """summary.json names the run a sync made or found; only a final one is uploaded again."""
    summary = read_summary(run_dir)
    rid = run.link.run_id
    if summary is None or rid is None or summary.get("mlflow_run_id") == rid:
        return False
    summary["mlflow_run_id"] = rid
    write_summary(run_dir, summary)
    if summary.get("status") in ("FINISHED", "FAILED", "KILLED"):
        try:
            run.client.log_dict(rid, summary, SUMMARY_FILE)
        except Exception as exc:  # the local file is right; the artifact waits for next time
            print(f"rlexp.sync: warning: {SUMMARY_FILE} artifact not updated: "
                  f"{store.first_line(exc)}", flush=True)
    return True


def main(argv: list[str] | None = None) -> None:
    parser = OneLineParser(prog="python -m rlexp.sync", description=__doc__.split(
        "\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run dir (holds tracking.json), or a "
                        "sweep dir: each of its runs, then its parent run")
    parser.add_argument("--all", action="store_true",
                        help="also send metrics after the last checkpoint (no resume coming)")
    parser.add_argument("--uri", help="send to this tracking URI instead of the recorded one")
    parser.add_argument("--new-run", action="store_true",
                        help="deliver the spool into a new MLflow run (the old one, or its "
                             "store, is gone)")
    parser.add_argument("--experiment", help="experiment of a rebuilt tracking.json or a new "
                                             "run (default: the recorded one, else 'rlexp')")
    args = parser.parse_args(argv)
    remember(args.uri)  # masked in every line, MLflow's errors included
    install_log_redaction()
    # MLflow retries through urllib3, which logs each retry: rlexp.sync says it once.
    logging.getLogger("urllib3.connectionpool").addFilter(
        lambda record: not str(record.msg).startswith("Retrying ("))
    try:
        account = sync(args.run_dir, args.all, args.uri, args.new_run, args.experiment)
        print("\n".join(f"rlexp.sync: {line}" for line in account.splitlines()))
    except UserError as exc:
        fail(str(exc))


if __name__ == "__main__":
    main()
