"""Send what a run dir's spool still holds to MLflow: `python -m rlexp.sync <run dir>`.

After the store was unreachable during a run (or the run crashed), the records not yet in
the store wait in <run dir>/tracking_spool.jsonl. Sending is idempotent, so syncing twice,
or syncing a run that later resumes, logs nothing twice. Metrics after the last checkpoint
are held back (a resume produces them again) unless --all says the run will not resume.
"""

from __future__ import annotations

import argparse
import fcntl
import os
from pathlib import Path

from rlexp.errors import UserError, fail
from rlexp.redact import MASK, redact_uri
from rlexp.tracking import store
from rlexp.tracking.run import ALWAYS, TrackedRun, record
from rlexp.tracking.spool import LOCK_FILE, Link


def sync(run_dir: Path, send_all: bool = False, uri: str | None = None) -> str:
    """Replay the spool of `run_dir`; returns a one-line account. Raises UserError."""
    run_dir = Path(run_dir)
    link = Link.load(run_dir)
    if link is None:
        raise UserError(f"{run_dir} has no tracking.json (was it tracked with tracker=mlflow?)")
    if uri:
        link.uri = store.resolve_uri(uri)  # the store moved (e.g. a server's new address)
    elif MASK in link.uri:  # tracking.json keeps the URI with its credentials masked
        env = os.environ.get("MLFLOW_TRACKING_URI", "")
        if not env or redact_uri(env) != link.uri:
            raise UserError(f"{run_dir}/tracking.json names {link.uri} with its credentials "
                            "masked: pass the full URI with --uri (or set MLFLOW_TRACKING_URI)")
        link.uri = env
    with open(run_dir / LOCK_FILE, "a") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            raise UserError(f"a live process is tracking {run_dir}; it sends its spool "
                            "itself") from None
        run = TrackedRun(run_dir, link)
        ended = any(r["kind"] == "status" and r["status"] != "RUNNING" for r in run.records)
        gate = ALWAYS if send_all or not link.gated else link.checkpoint_step
        try:
            if link.run_id is not None and not ended and \
                    run.client.get_run(link.run_id).info.status == "RUNNING":
                # No process holds the lock, so nothing is running: the run crashed.
                run.add(record("status", status="KILLED", t=None))
            sent = run.flush(gate)
        except Exception as exc:
            raise UserError(f"could not reach the MLflow store {link.uri}: "
                            f"{store.first_line(exc)}") from None
        finally:
            run.close()
        if uri:
            link.save(run_dir)
        held = sum(r["kind"] == "metrics" for r in run.records)
        note = (f"; {held} metric records after the last checkpoint (step "
                f"{link.checkpoint_step}) held back for a resume (--all sends them)"
                if held else "")
        return f"sent {sent} records to MLflow run {link.run_id} ({link.uri}){note}"


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m rlexp.sync", description=__doc__.split(
        "\n")[0])
    parser.add_argument("run_dir", type=Path, help="the run dir (holds tracking.json)")
    parser.add_argument("--all", action="store_true",
                        help="also send metrics after the last checkpoint (no resume coming)")
    parser.add_argument("--uri", help="send to this tracking URI instead of the recorded one")
    args = parser.parse_args(argv)
    try:
        print(f"rlexp.sync: {sync(args.run_dir, args.all, args.uri)}")
    except UserError as exc:
        fail(str(exc))


if __name__ == "__main__":
    main()
