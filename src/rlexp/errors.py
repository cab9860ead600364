"""User-facing errors: one line, exit code 2, no traceback."""

from __future__ import annotations

import sys

EXIT_USAGE = 2


class UserError(Exception):
    """A mistake the user can fix (bad key, value, path, hardware). Printed as one line."""


def fail(message: str) -> "NoReturn":  # noqa: F821
    print(f"rlexp: error: {message}", file=sys.stderr, flush=True)
    sys.exit(EXIT_USAGE)
