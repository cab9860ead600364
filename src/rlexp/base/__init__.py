"""Base layer: what every other layer may use, and which imports nothing of rlexp above it.

errors (UserError: one line, exit 2), redact (secrets masked), events (the listener
interface the loop talks to), lock (one process per run dir), files (atomic JSON), plugins
(dotted-path user code), retention (keep-N of what runs leave on disk), runtime (the garbage
collector, process exit and RLEXP_FAST_START, the switch of every start-up shortcut),
private_apis (the private names of Hydra, loky and Python rlexp relies on, checked),
python_fixes (work-arounds for interpreter bugs, gated to the versions that have them). May
import: the standard library and small third-party packages.
"""
