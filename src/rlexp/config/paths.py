"""Where rlexp's own files are: the config tree and sweep declarations (wheel or checkout)."""

from __future__ import annotations

from pathlib import Path

from rlexp.base.errors import UserError

# The rlexp package dir (this file is rlexp/config/paths.py).
_HERE = Path(__file__).resolve().parents[1]


def _first_dir(name: str) -> Path | None:
    # Inside the installed wheel (rlexp/conf) or at the checkout root (editable install).
    return next((d for d in (_HERE / name, _HERE.parents[1] / name) if d.is_dir()), None)


def conf_dir() -> Path:
    found = _first_dir("conf")
    if found is None or not (found / "config.yaml").is_file():
        raise UserError(f"config tree conf/ not found next to {_HERE} (reinstall rlexp)")
    return found


def sweeps_dir() -> Path | None:
    return _first_dir("sweeps")
