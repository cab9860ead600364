"""rlexp: run, sweep and compare GRPO/GSPO post-training experiments on Tunix, in MLflow.

The layers, highest first, each importing only those below (pyproject.toml's importlinter
contracts): launch (pre-flight) -> job (one run) -> engine (Tunix) -> planning | inputs | data
| tracking -> config -> algo | families (model architectures) -> base. The top-level modules
are commands, thin doors into their layer: __main__ (`python -m rlexp`), sync, export, ui and
report; rewards keeps the built-in reward functions under the names configs use.
"""

from rlexp.base.python_fixes import serialise_ast_parse

__version__ = "0.1.0"

# Before any thread starts: every process that imports rlexp (the CLI, launcher workers).
# Hydra's schema and name resolvers are registered by rlexp.config, which every process that
# composes or resolves a config imports: `import rlexp` itself loads no Hydra.
serialise_ast_parse()
