"""Config layer: the typed schema of every config group, its validation, and the names
derived from a config (run names, dotted params, where the packaged conf/ and sweeps/ live).

schema (dataclasses registered in Hydra's ConfigStore: data only), validate (the CHOICES and
RANGES tables, checked generically, then the rules), rules (the named cross-field rules),
convert (DictConfig -> validated Config), naming, paths.
May import: rlexp.algo (the registered algorithms and their choices), rlexp.families (the
model families, model.family's choices), rlexp.base.
"""

from rlexp.config.naming import register_resolvers
from rlexp.config.schema import register_configs

# Hydra needs the schema and the name resolvers in every process that composes or resolves a
# config (the CLI, and launcher workers that unpickle a job): every such process imports this
# package (rlexp.__main__, rlexp.launch, the job's modules).
register_configs()
register_resolvers()
