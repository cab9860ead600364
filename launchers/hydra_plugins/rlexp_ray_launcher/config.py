"""Config of the Ray launcher, stored in Hydra's ConfigStore as `hydra/launcher=rlexp_ray`."""

# No `from __future__ import annotations`: Hydra's plugin scan executes this module without
# registering it in sys.modules, and dataclasses with string annotations then crash.
from dataclasses import dataclass
from typing import Optional

from hydra.core.config_store import ConfigStore


@dataclass
class RlexpRayConf:
    _target_: str = "hydra_plugins.rlexp_ray_launcher.ray_launcher.RlexpRayLauncher"
    # The running Ray cluster: host:port of `ray start --head` (its GCS port), or auto = the
    # cluster `ray start` left on this machine ($RAY_ADDRESS wins).
    address: str = "${oc.env:RAY_ADDRESS,auto}"
    # CPUs per process (Ray task); None = the job's hardware.cpus_per_task.
    cpus_per_task: Optional[float] = None
    # GPUs per process (one process per host); None = the job's hardware.gpus_per_node.
    gpus_per_task: Optional[float] = None
    # Seconds a job may take (all its processes); None = the job's hardware.timeout_min.
    timeout_s: Optional[int] = None


ConfigStore.instance().store(group="hydra/launcher", name="rlexp_ray", node=RlexpRayConf,
                             provider="rlexp_ray_launcher")
