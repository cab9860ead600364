"""Config layer: the typed schema of every config group, its validation, and the names
derived from a config (run names, dotted params, where the packaged conf/ and sweeps/ live).

schema (dataclasses registered in Hydra's ConfigStore, DictConfig -> Config), naming, paths.
May import: rlexp.algo (the registered algorithms and their choices), rlexp.base.
"""
