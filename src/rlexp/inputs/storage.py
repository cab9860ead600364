"""Run outputs on a bucket: `run.output_uri=gs://bucket/prefix`. The run dir stays local; what
must outlive the machine goes under <output_uri>/<run name>/: checkpoints/ (orbax writes and reads
them there, so a rerun elsewhere resumes), and summary.json and export/ copied at the run's end
through fsspec (any fsspec URL)."""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any

from rlexp.base.errors import UserError
from rlexp.base.plugins import first_line
from rlexp.inputs.sources import Source, _filesystem as source_fs

# etils (orbax's path library) is imported only for a bucket output_uri.

log = logging.getLogger("rlexp")

_URL = re.compile(r"^([a-z][a-z0-9+.-]*)://")


def run_root(output_uri: str | None, run_name: str) -> str | None:
    """<output_uri>/<run name>, or None when outputs stay local."""
    return f"{output_uri.rstrip('/')}/{run_name}" if output_uri else None


def checkpoint_dir(output_uri: str | None, run_dir: Path, run_name: str) -> Any:
    """Where a run's checkpoints live: <run dir>/checkpoints, or <output_uri>/<name>/checkpoints
    as an etils path (keeps the scheme through `/`, rename and listing, as orbax expects)."""
    root = run_root(output_uri, run_name)
    if root is None:
        return run_dir / "checkpoints"
    if root.startswith("file://"):  # a shared mount (NFS, Filestore): a plain local path
        return Path(root[len("file://"):]) / "checkpoints"
    from etils import epath
    return epath.Path(f"{root}/checkpoints")


def check(output_uri: str | None) -> None:
    """Pre-flight: run.output_uri is a URL (its backend is checked where the run runs)."""
    if output_uri and not _URL.match(output_uri):
        raise UserError(f"run.output_uri={output_uri}: not a URL; valid choices are "
                        f"gs://bucket/prefix (or another fsspec URL), or null for local outputs")


def check_backend(output_uri: str | None) -> None:
    """Where the run runs: the filesystem backend of run.output_uri is installed (gcsfs)."""
    if output_uri:
        check(output_uri)
        _filesystem(output_uri)


def _filesystem(url: str) -> Any:
    try:
        return source_fs(Source("url", url, url))
    except UserError as exc:  # same message, named after this key
        raise UserError(str(exc).replace("model.path=", "run.output_uri=", 1)) from None


def upload(local: Path, url: str) -> None:
    """Copy a file or a directory tree to `url` (replacing what is there)."""
    fs = _filesystem(url)
    target = url.rstrip("/")
    pairs = [(path, f"{target}/{path.relative_to(local).as_posix()}")
             for path in sorted(p for p in local.rglob("*") if p.is_file())] \
        if local.is_dir() else [(local, target)]
    for path, remote in pairs:
        # a mounted dir needs its parents; on object stores (gs://) this is a no-op
        fs.makedirs(remote.rsplit("/", 1)[0], exist_ok=True)
        fs.put_file(str(path), remote)


def mirror_outputs(output_uri: str | None, run_name: str, run_dir: Path) -> str | None:
    """Copy a finished or stopped run's summary.json and export/ to its root; never fatal."""
    root = run_root(output_uri, run_name)
    if root is None:
        return None
    try:
        for name in ("export", "summary.json"):  # summary last: it says the copy is complete
            if (run_dir / name).exists():
                upload(run_dir / name, f"{root}/{name}")
    except Exception as exc:
        log.warning("could not copy the run's outputs to %s (%s: %s)", root, type(exc).__name__,
                    first_line(exc)[:160])
        return None
    return root
