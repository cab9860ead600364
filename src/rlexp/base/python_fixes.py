"""Work-arounds for Python interpreter bugs, each gated to the versions that have it. CPython
3.11.0-3.11.7 and 3.12.0, gh-106905: `ast.parse` keeps its recursion-depth counter in
interpreter-wide state, so two threads parsing at once raise "SystemError: AST constructor recursion
depth mismatch". `inspect.signature` of a builtin, `traceback` and `ast.literal_eval` parse at run
time on any thread: a two-process Ray job died of it in CI (3.11.7). Fixed in 3.11.8 and 3.12.1;
here every `ast.parse` takes one re-entrant lock."""

from __future__ import annotations

import ast
import functools
import sys
import threading
from typing import Any

_PATCHED = "_rlexp_serialised"


def ast_parse_is_thread_unsafe(version: tuple[int, ...] = tuple(sys.version_info[:3])) -> bool:
    """True on the interpreters with gh-106905 (3.11.0 up to 3.11.7, 3.12.0)."""
    return (3, 11, 0) <= version < (3, 11, 8) or version[:3] == (3, 12, 0)


def serialise_ast_parse() -> None:
    """Make `ast.parse` take one process-wide re-entrant lock (a finaliser may parse inside)."""
    if not ast_parse_is_thread_unsafe() or getattr(ast.parse, _PATCHED, False):
        return
    parse, lock = ast.parse, threading.RLock()

    @functools.wraps(parse)
    def locked_parse(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return parse(*args, **kwargs)

    setattr(locked_parse, _PATCHED, True)
    ast.parse = locked_parse
