"""math-verify's timeouts: on where they can work, off (quietly) where they cannot."""

from __future__ import annotations

import logging
import threading


def _no_timeout_notice(record: logging.LogRecord) -> bool:
    """Drops math-verify's notice that its timeout is off (said on every call off the main
    thread, where the off timeout is deliberate)."""
    return "Timeout is disabled" not in record.getMessage()


def math_verify_timeout() -> int | None:
    """Seconds for math-verify's parse/verify timeouts: 5 on the main thread; None (off)
    elsewhere, since its timeout is a SIGALRM, which only the main thread may set (the
    learner may call rewards from a worker thread)."""
    if threading.current_thread() is threading.main_thread():
        return 5
    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_no_timeout_notice)  # a no-op when already there
    return None
