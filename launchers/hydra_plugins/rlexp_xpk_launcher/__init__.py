"""rlexp's XPK launcher: `hydra/launcher=xpk` submits each sweep job as an xpk workload.

Lives in the `hydra_plugins` namespace package (no __init__.py one level up) so Hydra's plugin
scan finds it next to the installed plugins.
"""
