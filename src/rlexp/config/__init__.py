"""Config layer: schema (in Hydra's ConfigStore), validate (ranges, choices, then the rules),
refusal (what a rule or range returns), rollouts (backends' Tunix-free half), convert
(DictConfig -> Config), naming, paths. May import: rlexp.algo (AlgoConfig), rlexp.families
(model.family's choices) and rlexp.base."""

from rlexp.config.naming import register_resolvers
from rlexp.config.schema import register_configs

# Hydra needs the schema and the name resolvers in every process that composes or resolves a
# config (the CLI, launcher workers that unpickle a job), and every such process imports this.
register_configs()
register_resolvers()
