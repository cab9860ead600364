"""Work-arounds for bugs in the Python interpreter rlexp runs on, each gated to the versions
that have the bug, so a fixed interpreter runs the standard library untouched.

CPython 3.11.0-3.11.7 and 3.12.0, gh-106905: `ast.parse` keeps its recursion-depth counter
in interpreter-wide state, so two threads parsing at once (a thread switch inside the C
conversion, e.g. while a finaliser runs) raise "SystemError: AST constructor recursion depth
mismatch". The standard library parses at run time: `inspect.signature` of a builtin
(`_signature_fromstr`), `traceback`'s caret anchors (3.11), `ast.literal_eval`. An rlexp job
does so on its main thread (JAX tracing) while its MLflow writer and store threads import and
log; a two-process Ray job died of it in CI (Python 3.11.7). Fixed upstream in 3.11.8 and
3.12.1 by a counter per call; here every `ast.parse` is serialised by one re-entrant lock.
"""

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
    """Make `ast.parse` take one process-wide re-entrant lock (once; a no-op where the
    interpreter is fixed). Re-entrant: a finaliser that runs inside a parse and parses
    again on the same thread nests, which the shared counter survives."""
    if not ast_parse_is_thread_unsafe() or getattr(ast.parse, _PATCHED, False):
        return
    parse, lock = ast.parse, threading.RLock()

    @functools.wraps(parse)
    def locked_parse(*args: Any, **kwargs: Any) -> Any:
        with lock:
            return parse(*args, **kwargs)

    setattr(locked_parse, _PATCHED, True)
    ast.parse = locked_parse
