"""Files readers never see half-written: write a temporary sibling, then os.replace (rename(2) swaps
a name in one step; a dir too, when the destination is missing or empty); also set_aside and
remove_dry_run_dir."""

from __future__ import annotations

import json
import os
import shutil
import threading
import time
from pathlib import Path
from typing import Any


def temp_sibling(path: Path) -> Path:
    """A temp name beside `path`, per process and thread (the sender and the loop may race)."""
    path = Path(path)
    return path.with_name(f"{path.name}.{os.getpid()}.{threading.get_ident()}.tmp")


def replace(tmp: Path, path: Path) -> None:
    """Put the finished file or dir `tmp` in place of `path` in one step."""
    os.replace(tmp, path)


def write_atomic(path: Path, data: str | bytes) -> None:
    tmp = temp_sibling(path)
    try:
        if isinstance(data, bytes):
            tmp.write_bytes(data)
        else:
            tmp.write_text(data)
        replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)  # a write that failed (full disk) leaves no .tmp behind


def write_json_atomic(path: Path, data: Any) -> None:
    write_atomic(path, json.dumps(data, indent=2, default=str))


def set_aside(path: Path) -> Path:
    """Move a damaged file to <name>.damaged-<unix time>, kept for a post-mortem."""
    aside = path.with_name(f"{path.name}.damaged-{int(time.time())}")
    os.replace(path, aside)
    return aside


def read_json_object(path: Path) -> dict | None:
    """The JSON object in `path`; None when it is missing, unreadable, torn or not an object."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


# What Hydra writes in every sweep dir before any job runs.
MULTIRUN_FILE = "multirun.yaml"


def remove_dry_run_dir(sweep_dir: Path) -> None:
    """A dry run leaves nothing: remove the sweep dir Hydra's sweeper made and its empty parents."""
    if not sweep_dir.is_dir() or {p.name for p in sweep_dir.iterdir()} - {MULTIRUN_FILE}:
        return
    shutil.rmtree(sweep_dir, ignore_errors=True)
    cwd = Path.cwd().resolve()
    parent = sweep_dir.resolve().parent
    while parent != cwd and cwd in parent.parents:
        try:
            parent.rmdir()  # only when empty
        except OSError:
            break
        parent = parent.parent
