"""`hydra/launcher=joblib` with n_jobs=2 instead of the plugin's -1 (one worker per CPU), and the
sweep's progress shown by rlexp (joblib_launcher.py). Each rlexp job already keeps every core busy
through XLA, so more than 2 parallel jobs add memory and contention, not speed; raise it on a big
machine: hydra.launcher.n_jobs=8. Not a conf/hydra/launcher/joblib.yaml: Hydra 1.3 "automatically
matches" a file named after a stored schema against it, warning on every run; re-storing the
plugin's own dataclass keeps the schema without one. Hydra's plugin scan imports hydra_plugins.* in
path order, the joblib plugin's first (site-packages before launchers/; in a wheel, alphabetical),
so this entry replaces the plugin's; tests/test_launchers.py checks n_jobs == 2."""

# No `from __future__ import annotations`: Hydra's plugin scan executes this module without
# registering it in sys.modules, and dataclasses with string annotations then crash.
from dataclasses import dataclass

from hydra.core.config_store import ConfigStore
from hydra_plugins.hydra_joblib_launcher.config import JobLibLauncherConf


@dataclass
class RlexpJoblibConf(JobLibLauncherConf):
    # The plugin's launcher, with the sweep's progress shown by rlexp.
    _target_: str = "hydra_plugins.rlexp_presets.joblib_launcher.RlexpJoblibLauncher"
    n_jobs: int = 2  # concurrent jobs: 2 (see the module docstring); -1 = one per CPU


ConfigStore.instance().store(group="hydra/launcher", name="joblib", node=RlexpJoblibConf,
                             provider="rlexp")
