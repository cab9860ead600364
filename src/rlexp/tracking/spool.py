"""What a run dir remembers about its MLflow run: the link (tracking.json) and the spool.

The spool (tracking_spool.jsonl) is a write-ahead log: every record a listener produces is
appended here first and removed once the store has it. It is what makes tracking survive a
dead server (records wait here, `python -m rlexp.sync` replays them) and a crash (records of
steps covered by a checkpoint are still logged when the run resumes, the others dropped).

Record kinds (one JSON object per line, "kind" says which):
  start      {name, tags, parent_run_id}  the run could not be created yet
  params     {params}                     run params (logged once the run exists)
  tags       {tags}
  metrics    {step, t, values}            t: wall time in ms, kept so a replay is idempotent
  artifact   {path, artifact_path}        a local file or dir to upload
  json       {artifact_file, data}        a small JSON artifact (summary.json)
  curves     {}                           draw curves.png from the store's history, upload it
  status     {status, t}                  RUNNING (resume) or the final status
"""

from __future__ import annotations

import dataclasses
import json
import os
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

LINK_FILE = "tracking.json"
SPOOL_FILE = "tracking_spool.jsonl"
LOCK_FILE = "tracking.lock"


def write_json_atomic(path: Path, data: Any) -> None:
    # A tmp name per process and thread: the writer thread and the loop may both save.
    tmp = path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str))
    os.replace(tmp, path)  # readers never see half a file


@dataclass
class Link:
    """tracking.json: which store and run this run dir logs to."""

    # Tracking URI (absolute for sqlite).
    uri: str
    # Experiment name.
    experiment: str
    # MLflow run id; None while the store was unreachable at start (a start record waits).
    run_id: str | None = None
    # MLflow experiment id, once known.
    experiment_id: str | None = None
    # Metrics are written only up to the latest checkpoint (train.checkpoint_every > 0).
    gated: bool = False
    # Step of the latest checkpoint reported (the gate; -1 = none yet).
    checkpoint_step: int = -1

    @classmethod
    def load(cls, run_dir: Path) -> "Link | None":
        try:
            data = json.loads((Path(run_dir) / LINK_FILE).read_text())
        except (OSError, ValueError):
            return None
        names = {f.name for f in dataclasses.fields(cls)}
        if not isinstance(data, dict) or "uri" not in data:
            return None
        return cls(**{k: v for k, v in data.items() if k in names})

    def save(self, run_dir: Path) -> None:
        write_json_atomic(Path(run_dir) / LINK_FILE, dataclasses.asdict(self))


class Spool:
    """Append-only JSONL file of records not yet in the store; rewritten after a flush."""

    def __init__(self, path: Path):
        self.path = Path(path)
        self._handle: IO[str] | None = None

    def read(self) -> list[dict]:
        if not self.path.exists():
            return []
        records = []
        for line in self.path.read_text().splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue  # a line cut short by a crash: its step was not checkpointed anyway
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
        tmp = self.path.with_name(self.path.name + ".tmp")
        tmp.write_text("".join(json.dumps(r, separators=(",", ":")) + "\n" for r in records))
        os.replace(tmp, self.path)

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None
