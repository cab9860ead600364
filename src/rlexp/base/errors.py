"""User-facing errors: one line, exit code 2, no traceback."""

from __future__ import annotations

import argparse
import sys
from typing import NoReturn

EXIT_USAGE = 2


class UserError(Exception):
    """A mistake the user can fix (bad key, value, path, hardware). Printed as one line."""


def fail(message: str) -> NoReturn:
    # Imported here: redact's Hydra callback imports Hydra, and importing this module (every
    # layer raises UserError) must not.
    from rlexp.base.redact import redact_text

    # Error lines echo the user's values (a bad override, a URI): never a credential.
    print(f"rlexp: error: {redact_text(message)}", file=sys.stderr, flush=True)
    sys.exit(EXIT_USAGE)


class OneLineParser(argparse.ArgumentParser):
    """argparse for rlexp's tools (report, sync, ui, export): a usage mistake is one line, as
    the main command's (argparse's own is the usage block, then its message)."""

    def error(self, message: str) -> NoReturn:
        fail(f"{message} (see {self.prog} --help)")
