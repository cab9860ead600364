"""rlexp's XPK launcher, `hydra/launcher=xpk`: each sweep job as an xpk workload. hydra_plugins
has no __init__.py (a namespace package), so Hydra's plugin scan finds it beside installed ones."""
