"""<run dir>/summary.json, a run's record: the only module that writes it, so every writer
redacts and replaces it atomically."""

from __future__ import annotations

import json
from pathlib import Path

from rlexp.base import files, runtime
from rlexp.base.files import read_json_object
from rlexp.base.redact import redact_obj

SUMMARY_FILE = "summary.json"


def read_summary(run_dir: Path) -> dict | None:
    """The run's summary, None when missing, unreadable or not a JSON object."""
    return read_json_object(Path(run_dir) / SUMMARY_FILE)


def write_summary(run_dir: Path, summary: dict) -> None:
    if not runtime.is_main_process():  # one record per run: process 0 writes it
        return
    tmp = Path(run_dir) / f"{SUMMARY_FILE}.tmp"
    try:
        tmp.write_text(json.dumps(redact_obj(json.loads(json.dumps(summary, default=str))),
                                  indent=2))
        tmp.replace(Path(run_dir) / SUMMARY_FILE)  # atomic: readers never see half a file
    except OSError:
        tmp.unlink(missing_ok=True)  # a full disk: no half-written file stays
        raise


def set_aside(run_dir: Path) -> Path:
    """A damaged summary.json moves to summary.json.damaged-<time>, kept for a post-mortem."""
    return files.set_aside(Path(run_dir) / SUMMARY_FILE)
