"""rlexp: run, sweep and compare GRPO/GSPO post-training experiments on Tunix, in MLflow."""

__version__ = "0.1.0"


def _register() -> None:
    # Hydra needs the schema and the name resolvers in every process that composes or
    # resolves a config (the CLI, and launcher workers that unpickle a job).
    from rlexp.config import register_configs
    from rlexp.naming import register_resolvers

    register_configs()
    register_resolvers()


_register()
