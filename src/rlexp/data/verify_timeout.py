"""math-verify's timeouts: on where they can work, off (quietly) where they cannot.

Shared by the reward sets (rlexp.data.reward_sets), MaxText's current grading
(rlexp.data.maxtext_grading) and the built-in math_verify reward (rlexp.data.rewards).
"""

from __future__ import annotations

import logging
import threading


class _NoTimeoutNotice(logging.Filter):
    """Drops math-verify's notice that its timeout is off (said on every call off the main
    thread, where the off timeout is deliberate)."""

    def filter(self, record: logging.LogRecord) -> bool:
        return "Timeout is disabled" not in record.getMessage()


_NOTICE = _NoTimeoutNotice()


def math_verify_timeout() -> int | None:
    """Seconds for math-verify's parse/verify timeouts: 5 on the main thread; None (off)
    elsewhere, since its timeout is a SIGALRM, which only the main thread may set (the
    learner may call rewards from a worker thread)."""
    if threading.current_thread() is threading.main_thread():
        return 5
    for name in ("math_verify.parser", "math_verify.grader"):
        logger = logging.getLogger(name)
        if _NOTICE not in logger.filters:
            logger.addFilter(_NOTICE)
    return None
