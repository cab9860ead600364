"""Where model weights come from: `model.path` as a local dir, a hub id or a bucket URL.
    model.path=/data/qwen3-0.6b          a local Hugging Face dir (config.json + *.safetensors)
    model.path=Qwen/Qwen3-0.6B[@rev]     the Hugging Face hub, through huggingface_hub's own cache
                                         (HF_HOME / HF_HUB_CACHE; HF_TOKEN from the environment)
    model.path=gs://bucket/dir           any fsspec URL (gs:// needs gcsfs), copied once into
                                         <run.cache_dir>/models/
`check()` is the pre-flight (a dry run too), `fetch()` makes the weights local."""

from __future__ import annotations

import hashlib
import os
import re
import shutil
from dataclasses import dataclass
from fnmatch import fnmatch
from pathlib import Path

from rlexp.base.errors import UserError
from rlexp.base.files import replace
from rlexp.base.plugins import first_line

# huggingface_hub and fsspec are imported only for a hub id or a URL (gs://: rlexp[gcs]).

# Hugging Face repo ids `org/name[@revision]`; a bare `name` is far more likely a relative dir.
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+(@[\w./-]+)?$")
_URL = re.compile(r"^([a-z][a-z0-9+.-]*)://(.+)$")
# Files a model dir needs; the rest of a repo (README, onnx/, original/) is not copied.
WEIGHT_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja"]
# Marker written last into a copied dir: a copy interrupted halfway is redone, not used.
COMPLETE = ".rlexp-complete"
# Extra that brings each fsspec protocol's backend.
_BACKENDS = {"gs": ("gcsfs", "gcs"), "gcs": ("gcsfs", "gcs"), "s3": ("s3fs", "s3")}


@dataclass(frozen=True)
class Source:
    kind: str  # local | hub | url
    spec: str  # the value of model.path, as given
    target: str  # hub: repo id; url: protocol://rest; local: the path
    revision: str | None = None  # hub: branch/tag/sha after '@' (None = main)


def parse(spec: str) -> Source:
    """Classify model.path. An existing local dir always wins over a hub id of the same text."""
    url = _URL.match(spec)
    if url and url.group(1) != "file":
        return Source("url", spec, spec)
    if url:  # file:///abs/dir
        return Source("local", spec, url.group(2))
    local = Path(spec).expanduser()
    if local.exists() or spec.startswith((".", "/", "~")) or not _HUB_ID.match(spec):
        return Source("local", spec, spec)
    repo, _, rev = spec.partition("@")
    return Source("hub", spec, repo, rev or None)


def check(spec: str, cache_dir: str) -> Path | None:
    """Pre-flight, no download: the local dir, cached snapshot or bucket copy, else None."""
    src = parse(spec)
    if src.kind == "local":
        return Path(src.target).expanduser()
    if src.kind == "hub":
        return _hub_cached(src)
    _filesystem(src)  # the backend is importable (gcsfs for gs://)
    done = _copy_dir(src, cache_dir)
    return done if (done / COMPLETE).is_file() else None


def fetch(spec: str, cache_dir: str) -> Path:
    """The local directory holding the weights of model.path (downloaded/copied once)."""
    src = parse(spec)
    if src.kind == "local":
        return Path(src.target).expanduser()
    return _hub_download(src) if src.kind == "hub" else copy_tree(src, cache_dir)

def _hub_cached(src: Source) -> Path | None:
    """A cached hub id's snapshot dir (local cache only), else None; offline uncached: UserError."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError
    try:
        path = Path(snapshot_download(src.target, revision=src.revision, local_files_only=True))
    except (LocalEntryNotFoundError, FileNotFoundError, OSError):
        path = None
    if path is not None and (path / "config.json").is_file():
        return path
    if os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on"):
        raise UserError(f"model.path={src.spec}: not in the Hugging Face cache "
                        f"({constants.HF_HUB_CACHE}) and HF_HUB_OFFLINE=1; download it once online "
                        f"(huggingface-cli download {src.target}) or pass a local dir")
    return None


def _hub_download(src: Source) -> Path:
    from huggingface_hub import snapshot_download
    cached = _hub_cached(src)
    if cached is not None and any(cached.glob("*.safetensors")):
        return cached
    try:
        # token=None: huggingface_hub reads HF_TOKEN itself; rlexp never holds or logs it.
        return Path(snapshot_download(src.target, revision=src.revision,
                                      allow_patterns=WEIGHT_PATTERNS))
    except Exception as exc:  # gated/missing repo, bad revision, no network
        raise UserError(f"model.path={src.spec}: download from the Hugging Face hub failed "
                        f"({type(exc).__name__}: {first_line(exc)[:160]}); check the id, the "
                        f"revision and HF_TOKEN for gated models") from None

def _filesystem(src: Source):
    import fsspec
    protocol = _URL.match(src.target).group(1)  # type: ignore[union-attr]
    try:
        return fsspec.filesystem(protocol)
    except ImportError:
        package, extra = _BACKENDS.get(protocol, (f"the fsspec backend of {protocol}://", protocol))
        raise UserError(f"model.path={src.spec}: reading {protocol}:// needs {package} "
                        f"(pip install 'rlexp[{extra}]')") from None
    except ValueError:
        raise UserError(f"model.path={src.spec}: unknown protocol {protocol}://; valid choices "
                        f"are a local dir, org/name[@revision] or gs://bucket/dir") from None


def _copy_dir(src: Source, cache_dir: str) -> Path:
    """Where a URL's copy lives: <cache_dir>/models/<protocol>/<last part>-<digest of URL>."""
    digest = hashlib.sha1(src.target.rstrip("/").encode()).hexdigest()[:12]
    protocol, rest = _URL.match(src.target).groups()  # type: ignore[union-attr]
    tail = re.sub(r"[^\w.-]+", "_", rest.rstrip("/").rsplit("/", 1)[-1]) or "model"
    return Path(cache_dir).expanduser() / "models" / protocol / f"{tail}-{digest}"


def copy_tree(src: Source, cache_dir: str) -> Path:
    """Copy a URL's model files into the run cache once (marker last; per-process temps, rename)."""
    dest = _copy_dir(src, cache_dir)
    if (dest / COMPLETE).is_file():
        return dest
    fs = _filesystem(src)
    root = src.target.rstrip("/")
    try:
        names = [p for p in fs.find(root)
                 if any(fnmatch(p.rsplit("/", 1)[-1], pat) for pat in WEIGHT_PATTERNS)]
    except Exception as exc:
        raise UserError(f"model.path={src.spec}: cannot list the bucket dir "
                        f"({type(exc).__name__}: {first_line(exc)[:160]})") from None
    if not names:
        raise UserError(f"model.path={src.spec}: no config.json / *.safetensors under it")
    tmp = dest.with_name(f"{dest.name}.tmp-{os.getpid()}")
    shutil.rmtree(tmp, ignore_errors=True)
    from fsspec.core import strip_protocol
    prefix = strip_protocol(root).rstrip("/") + "/"
    for remote in names:  # find() gives paths without the protocol: put it back to strip
        local = tmp / strip_protocol(fs.unstrip_protocol(remote))[len(prefix):]
        local.parent.mkdir(parents=True, exist_ok=True)
        fs.get_file(remote, str(local))
    (tmp / COMPLETE).write_text(src.target + "\n")
    if dest.exists():  # an unfinished copy of an earlier attempt
        shutil.rmtree(dest, ignore_errors=True)
    try:
        replace(tmp, dest)
    except OSError:  # another process finished first: use its copy
        shutil.rmtree(tmp, ignore_errors=True)
    return dest
