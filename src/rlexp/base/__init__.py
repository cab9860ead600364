"""Base layer: what every other layer may use; it imports nothing of rlexp above it. Errors, secrets
(redact, secret_env), the listener interface (events), locks, atomic files, plugins, retention,
summary.json, the process runtime, private_apis, python_fixes and knobs. May import the standard
library and small third-party packages; `import rlexp.base` and rlexp.base.errors load no Hydra."""
