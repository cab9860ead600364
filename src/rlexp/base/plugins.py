"""User code named by a dotted path (Hydra's `_target_`), resolved with one-line errors (a
UserError naming the key, at start-up): rewards, dataset builders and extractors, algorithms."""

from __future__ import annotations

import importlib
import inspect
from typing import Any

from rlexp.base.errors import UserError


def resolve(target: str, key: str, want_callable: bool = True) -> Any:
    """Dotted path 'pkg.module.fn' -> the object (Hydra's `_target_` rule), or UserError."""
    parts = target.split(".")
    if len(parts) < 2 or not all(parts):
        raise UserError(f"{key}={target!r}: not a dotted path 'package.module.function'")
    obj: Any = None
    for i in range(len(parts) - 1, 0, -1):  # the longest importable module prefix
        module = ".".join(parts[:i])
        try:
            obj = importlib.import_module(module)
            break
        except ModuleNotFoundError as exc:
            if exc.name and (module == exc.name or module.startswith(exc.name + ".")):
                continue  # this prefix is not a module: try a shorter one
            raise UserError(f"{key}={target!r}: importing {module!r} failed "
                            f"(ModuleNotFoundError: {exc})") from None
        except Exception as exc:  # the user's module itself fails at import
            raise UserError(f"{key}={target!r}: importing {module!r} failed "
                            f"({type(exc).__name__}: {first_line(exc)})") from None
    if obj is None:
        raise UserError(f"{key}={target!r}: no module {parts[0]!r} (is its directory on "
                        f"PYTHONPATH, or the package installed?)")
    for part in parts[i:]:
        if not hasattr(obj, part):
            kind = "submodule or attribute" if inspect.ismodule(obj) else "attribute"
            owner = getattr(obj, "__name__", type(obj).__name__)
            raise UserError(f"{key}={target!r}: cannot import it: {owner!r} has no {kind} {part!r}")
        obj = getattr(obj, part)
    if want_callable and not callable(obj):
        raise UserError(f"{key}={target!r}: not callable")
    return obj


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else ""
