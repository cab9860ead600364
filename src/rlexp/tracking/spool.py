"""What a run dir remembers about its MLflow run: the link (tracking.json) and the spool
(tracking_spool.jsonl), a write-ahead log: every record is appended here first and removed once the
store has it, so tracking survives a dead server (`python -m rlexp.sync` replays) and a crash
(records of steps a checkpoint covers are logged on resume, others dropped). One JSON object per
line, "kind" says which (REQUIRED lists the kinds); a line of another shape (torn, edited, random
bytes) is skipped with a warning and counted."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from rlexp.base.files import read_json_object, set_aside, write_atomic, write_json_atomic
from rlexp.base.redact import redact_uri

LINK_FILE = "tracking.json"
SPOOL_FILE = "tracking_spool.jsonl"
LOCK_FILE = "tracking.lock"


@dataclass
class Link:
    """tracking.json: which store and run this run dir logs to."""

    uri: str  # tracking URI (absolute for sqlite)
    experiment: str
    run_id: str | None = None  # None while the store was unreachable at start
    experiment_id: str | None = None
    gated: bool = False  # metrics written only up to the latest checkpoint
    checkpoint_step: int = -1  # step of the latest checkpoint reported (the gate; -1 = none yet)
    # Highest metrics step the store has (saved after each flush; -1 = none): a rerun that
    # restarts from an earlier step does not log these steps again.
    logged_step: int = -1

    @classmethod
    def load(cls, run_dir: Path) -> "Link | None":
        """The link, or None when tracking.json is missing or damaged (see `damaged`)."""
        data = read_json_object(Path(run_dir) / LINK_FILE)
        if data is None:
            return None
        types = {"uri": (str,), "experiment": (str,), "run_id": (str, type(None)),
                 "experiment_id": (str, type(None)), "gated": (bool,),
                 "checkpoint_step": (int,), "logged_step": (int,)}  # every field
        fields = {k: v for k, v in data.items() if k in types}
        if "uri" not in fields or "experiment" not in fields or \
                any(not isinstance(v, types[k]) for k, v in fields.items()):
            return None
        return cls(**fields)

    @staticmethod
    def damaged(run_dir: Path) -> bool:
        """tracking.json exists but cannot be used (garbage, truncated, wrong types)."""
        return (Path(run_dir) / LINK_FILE).exists() and Link.load(run_dir) is None

    @staticmethod
    def set_aside(run_dir: Path) -> Path:
        """Move a damaged tracking.json out of the way (kept for a post-mortem)."""
        return set_aside(Path(run_dir) / LINK_FILE)

    def save(self, run_dir: Path) -> None:
        # Credentials in the URI stay out of the file (a rerun or `rlexp.sync --uri` has them).
        data = {**dataclasses.asdict(self), "uri": redact_uri(self.uri)}
        write_json_atomic(Path(run_dir) / LINK_FILE, data)


# Fields each kind must have, with their types: a record without them cannot be sent, and
# one such record must not stop the others (it would block every flush behind it).
_NUMBER = (int, float)
REQUIRED: dict[str, dict[str, tuple]] = {
    "start": {"name": (str,)},  # + tags, parent_run_id: the run could not be created yet
    "params": {"params": (dict,)},  # logged once the run exists
    "tags": {"tags": (dict,)},
    # t: wall time in ms, kept so a replay is idempotent
    "metrics": {"step": (int,), "values": (dict,), "t": (int, type(None))},
    "artifact": {"path": (str,)},  # + artifact_path: a local file or dir to upload
    "json": {"artifact_file": (str,), "data": (dict, list)},  # summary.json
    "curves": {},  # draw curves.png from the store's history, upload it
    "status": {"status": (str,)},  # + t: RUNNING (resume) or the final status
    "text": {"artifact_file": (str,), "text": (str,)},
    "inputs": {"datasets": (list,)},  # MLflow run inputs
}


def is_valid(record: Any) -> bool:
    """A record the sender can handle (a kind from a newer rlexp is kept; the sender skips it)."""
    if not isinstance(record, dict) or not isinstance(record.get("kind"), str):
        return False
    if record["kind"] not in REQUIRED:
        return True
    for name, types in REQUIRED[record["kind"]].items():
        value = record.get(name)
        if not isinstance(value, types) or isinstance(value, bool):
            return False
    if record["kind"] == "metrics":
        return all(isinstance(v, _NUMBER) for v in record["values"].values())
    return True


class Spool:
    """Append-only JSONL file of records not yet in the store; rewritten after a flush."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._handle: IO[str] | None = None
        self.skipped = 0  # damaged lines the latest read() skipped (torn, edited, garbage)

    def read(self) -> list[dict]:
        """The valid records, in order; damaged lines are skipped and counted in `skipped`."""
        self.skipped = 0
        try:
            raw = self.path.read_bytes()
        except FileNotFoundError:
            return []
        records = []
        for line in raw.split(b"\n"):
            if not line.strip():
                continue
            try:
                record = json.loads(line.decode("utf-8"))
            except ValueError:  # UnicodeDecodeError is a ValueError too
                record = None
            if is_valid(record):
                records.append(record)
            else:
                self.skipped += 1
        return records

    def append(self, record: dict) -> None:
        if self._handle is None:
            self._handle = open(self.path, "a")
        # One write per record and a flush to the OS: survives the process dying (not the host).
        self._handle.write(json.dumps(record, separators=(",", ":")) + "\n")
        self._handle.flush()

    def rewrite(self, records: list[dict]) -> None:
        self.close()
        if not records:
            self.path.unlink(missing_ok=True)
            return
        write_atomic(self.path, "".join(json.dumps(r, separators=(",", ":")) + "\n"
                                        for r in records))

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
