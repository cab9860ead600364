"""Base layer: what every other layer may use, and which imports nothing of rlexp above it.

errors (UserError: one line, exit 2), redact (secrets masked), events (the listener
interface the loop talks to), lock (one process per run dir), files (atomic JSON), plugins
(dotted-path user code), retention (keep-N of what runs leave on disk), runtime (the garbage
collector and process exit). May import: the standard library and small third-party packages.
"""
