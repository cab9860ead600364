"""Keep-N pruning of what runs leave on disk: `<step>.unusable-<unix time>` checkpoint dirs (moved
aside by rlexp.job.resume) and the warm-start cache, pruned when a run adds or uses an entry
(half-written entries are left until STALE_TMP_S old)."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import time
from pathlib import Path

log = logging.getLogger("rlexp")

KEEP_UNUSABLE = 2  # unusable checkpoints kept per run dir (the newest ones)
STALE_TMP_S = 24 * 3600.0  # a warm-start temporary file this old belongs to a dead process
CACHE_FILE = "params.npz"

_UNUSABLE = re.compile(r"^\d+\.unusable-(\d+)$")


def prune_unusable(directory: Path, keep: int = KEEP_UNUSABLE) -> list[Path]:
    """Delete all but the newest `keep` unusable-checkpoint dirs; returns what was deleted."""
    if "://" in str(directory):  # run.output_uri (gs://): left to the bucket's lifecycle rules
        return []
    directory = Path(directory)
    if not directory.is_dir():
        return []
    found = [(int(m.group(1)), p.name, p) for p in directory.iterdir()
             if (m := _UNUSABLE.match(p.name)) and p.is_dir()]
    found.sort(reverse=True)  # newest first (time moved aside, then name)
    removed = [p for _, _, p in found[keep:]]
    for path in removed:
        shutil.rmtree(path, ignore_errors=True)
    if removed:
        log.info("pruned %d unusable checkpoint(s) in %s (keeping %d)", len(removed),
                 directory, keep)
    return removed


def mark_used(entry_file: Path) -> None:
    """An entry was used now (its mtime orders the cache)."""
    with contextlib.suppress(OSError):  # read-only cache: pruning then goes by creation time
        os.utime(entry_file)


def prune_cache(root: Path, keep: int, protect: Path | None = None) -> list[Path]:
    """Delete warm-start entries beyond the `keep` most recently used, never `protect`."""
    root = Path(root)
    if not root.is_dir():
        return []
    now = time.time()
    complete: list[tuple[float, Path]] = []
    removed: list[Path] = []
    for entry in root.iterdir():
        if not entry.is_dir():
            continue
        with contextlib.suppress(FileNotFoundError):
            complete.append(((entry / CACHE_FILE).stat().st_mtime, entry))
            continue
        try:  # the dir itself too: a writer makes it just before its temporary file
            stale = all(now - p.stat().st_mtime > STALE_TMP_S for p in [entry, *entry.iterdir()])
        except FileNotFoundError:  # a writer just renamed its file: the entry is live
            stale = False
        if stale and entry != protect:
            removed.append(entry)
    complete.sort(key=lambda item: item[0], reverse=True)
    removed += [entry for _, entry in complete[keep:] if entry != protect]
    for entry in removed:
        shutil.rmtree(entry, ignore_errors=True)
    if removed:
        log.info("warm-start cache %s: pruned %d entr%s (keeping the %d used last)", root,
                 len(removed), "y" if len(removed) == 1 else "ies", keep)
    return removed
