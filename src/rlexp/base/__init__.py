"""Base layer: what every other layer may use, and which imports nothing of rlexp above it.

errors (UserError: one line, exit 2), redact (secrets masked), events (the listener
interface the loop talks to), lock (one process per run dir), files (atomic JSON), plugins
(dotted-path user code), retention (keep-N of what runs leave on disk), summary (the one
writer of a run's summary.json), runtime (the garbage collector while a job runs, which
process this is, the supervisor of a multi-controller process), private_apis (every private
name of a library rlexp relies on, and their one checker), python_fixes (work-arounds for
interpreter bugs, gated to the versions that have them), secret_env (secrets a launcher hands
to remote jobs by name). May import: the standard library
and small third-party packages; `import rlexp.base` and rlexp.base.errors load no Hydra.
"""
