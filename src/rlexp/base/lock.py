"""One process at a time in a run dir or a sweep dir: an flock on <dir>/rlexp.lock (also try_flock
and flocked). Two identical commands resolve to the same dir (named from the overrides) and would
write the same checkpoints, spool and MLflow run. Taken before rlexp writes in the dir, held for the
job's life; the kernel drops it when its holder dies, the file only names the holder. flock works
across hosts on NFSv4 and Lustre mounted with -o flock. Process i > 0 of a multi-controller run
locks rlexp.<i>.lock: a run's processes never refuse each other, a second launch is refused in every
process."""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Iterator

from rlexp.base.errors import UserError
from rlexp.base.files import read_json_object

LOCK_FILE = "rlexp.lock"
# The winner writes its details right after taking the lock; a loser that reads the file in
# between waits this long, in small pauses, before naming an unknown holder.
READ_HOLDER_S = 1.0


class Busy(UserError):
    """The dir is locked by another live process."""


class DirLock:
    """An exclusive, non-blocking lock on `directory`."""

    def __init__(self, directory: Path, process: int = 0):
        self.directory = Path(directory)
        self.path = self.directory / (LOCK_FILE if process == 0 else f"rlexp.{process}.lock")
        self._handle: IO[str] | None = None

    def acquire(self) -> "DirLock":
        """Take the lock or raise Busy naming its holder. Writes only the lock file."""
        self.directory.mkdir(parents=True, exist_ok=True)
        handle = try_flock(self.path, "a+")
        if handle is None:
            raise Busy(self.busy_message())
        handle.seek(0)
        handle.truncate()
        # No command line: it may carry credentials, and the message does not need it.
        handle.write(json.dumps({"pid": os.getpid(), "host": socket.gethostname(),
                                 "since": round(time.time(), 3)}))
        handle.flush()
        self._handle = handle
        return self

    def release(self) -> None:
        if self._handle is not None:
            self._handle.close()  # closing drops the flock; the file stays (harmless)
            self._handle = None

    @property
    def held(self) -> bool:
        return self._handle is not None

    def __enter__(self) -> "DirLock":
        return self.acquire()

    def __exit__(self, *exc: object) -> None:
        self.release()

    def busy_message(self) -> str:
        info = read_holder(self.path)
        if not info:
            who = "another process"
        else:
            since = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(info.get("since", 0)))
            who = f"pid {info.get('pid')} on {info.get('host')} (since {since})"
        return (f"{self.directory} is in use by {who}: the same command is already running; "
                f"wait for it to end, or stop it and run the command again to resume")


def try_flock(path: Path, mode: str = "a") -> IO[str] | None:
    """`path` opened and flocked until closed (or its process dies); None when another holds it."""
    handle = open(path, mode)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.close()
        return None
    return handle


@contextmanager
def flocked(path: Path, mode: str = "a") -> Iterator[IO[str]]:
    """`path` opened and exclusively flocked, waiting for other holders; released on exit."""
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    with open(path, mode) as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        yield handle  # closing the handle drops the lock


def is_lock_file(name: str) -> bool:
    return name == LOCK_FILE or (name.startswith("rlexp.") and name.endswith(".lock")
                                 and name[6:-5].isdigit())


def read_holder(path: Path) -> dict | None:
    deadline = time.monotonic() + READ_HOLDER_S
    while True:
        data = read_json_object(path)
        if data is not None and "pid" in data:
            return data
        if time.monotonic() >= deadline:
            return None
        time.sleep(0.05)
