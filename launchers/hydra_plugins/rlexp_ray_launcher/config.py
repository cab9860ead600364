"""Config of the Ray launcher, stored in Hydra's ConfigStore as `hydra/launcher=rlexp_ray`."""

# No `from __future__ import annotations`: see hydra_plugins/rlexp_presets/config.py.
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from hydra.core.config_store import ConfigStore

# Variables copied to every worker when set here: Hugging Face's token and caches (as EasyDeL's
# TPU recipe hands workers HF_TOKEN, HF_HOME, HF_DATASETS_CACHE), offline switches, W&B's key,
# libtpu's flags, and PYTHONPATH (rlexp and plugins where not installed).
DRIVER_ENV = ["PYTHONPATH", "HF_TOKEN", "HF_HOME", "HF_DATASETS_CACHE", "HF_HUB_OFFLINE",
              "HF_DATASETS_OFFLINE", "WANDB_API_KEY", "LIBTPU_INIT_ARGS"]


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
    # TPU chips per process (Ray's "TPU" resource, one process per TPU host); None = the
    # job's hardware.chips / hardware.hosts on a TPU profile (v4-64: 4), 0 elsewhere.
    tpus_per_task: Optional[float] = None
    # Seconds a job may take (all its processes); None = the job's hardware.timeout_min.
    timeout_s: Optional[int] = None
    # Seconds to wait for a TPU slice's head (Ray's "TPU-<type>-head" resource) to be free.
    slice_timeout_s: int = 600
    # Extra environment of every worker (NAME: value), e.g. HF_HOME: /dev/shm/huggingface.
    env: Dict[str, str] = field(default_factory=dict)
    # Variables passed from the launching process to every worker when set there.
    env_from_driver: List[str] = field(default_factory=lambda: list(DRIVER_ENV))
    # Print each job's placement (bundles per host, resources, environment names) and start
    # nothing: no Ray connection, no MLflow parent run, no sweep dir left behind.
    dry_run: bool = False


ConfigStore.instance().store(group="hydra/launcher", name="rlexp_ray", node=RlexpRayConf,
                             provider="rlexp_ray_launcher")
