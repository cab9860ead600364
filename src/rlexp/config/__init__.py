"""Config layer: the typed schema of every config group, its validation, and the names
derived from a config (run names, dotted params, where the packaged conf/ and sweeps/ live).

schema (dataclasses registered in Hydra's ConfigStore: data only), validate (the CHOICES and
RANGES tables, checked generically, then the rules), rules (the named cross-field rules),
convert (DictConfig -> validated Config), naming, paths.
May import: rlexp.algo (the registered algorithms and their choices), rlexp.families (the
model families, model.family's choices), rlexp.base.
"""
