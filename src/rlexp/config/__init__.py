"""Config layer: schema (the typed dataclasses registered in Hydra's ConfigStore), validate
(each field's range or choices, then the rules), rules (the named cross-field rules), refusal
(what a rule or range returns), rollouts (each rollout backend's Tunix-free half: its rules,
checks, memory share), convert (DictConfig -> validated Config), naming (run and sweep names,
dotted params), paths (where the packaged conf/ and sweeps/ live). May import: rlexp.algo (the
algo section, AlgoConfig) and rlexp.families (the choices of model.family), rlexp.base.
"""

from rlexp.config.naming import register_resolvers
from rlexp.config.schema import register_configs

# Hydra needs the schema and the name resolvers in every process that composes or resolves a
# config (the CLI, launcher workers that unpickle a job), and every such process imports this.
register_configs()
register_resolvers()
