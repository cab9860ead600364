"""Config of the XPK launcher, stored in Hydra's ConfigStore as `hydra/launcher=xpk`."""

# No `from __future__ import annotations`: see hydra_plugins/rlexp_presets/config.py.
from dataclasses import dataclass, field
from typing import Dict, List, Optional

from hydra.core.config_store import ConfigStore


@dataclass
class XpkLauncherConf:
    _target_: str = "hydra_plugins.rlexp_xpk_launcher.xpk_launcher.XpkLauncher"

    # The xpk executable (split like a shell word list, so "python -m xpk.main" works too).
    # RLEXP_XPK_BIN points at an xpk installed outside this environment (its pins clash).
    xpk: str = "${oc.env:RLEXP_XPK_BIN,xpk}"
    cluster: str = "rlexp"  # GKE cluster of the workloads (made by `xpk cluster create`)
    # GCP project; None = xpk asks `gcloud config get project`.
    project: Optional[str] = "${oc.env:RLEXP_XPK_PROJECT,null}"
    # GCP zone of the cluster; None = xpk asks `gcloud config get compute/zone`.
    zone: Optional[str] = "${oc.env:RLEXP_XPK_ZONE,null}"
    # Container image with rlexp installed (docker/tpu.Dockerfile; README "Launchers"); None =
    # xpk builds one from base_docker_image with script_dir (needs docker here). Neither: refused.
    docker_image: Optional[str] = "${oc.env:RLEXP_DOCKER_IMAGE,null}"
    # Base image when xpk builds the image itself (docker_image unset): one with rlexp's
    # dependencies installed (xpk's default, python:3.10, has none).
    base_docker_image: Optional[str] = None
    # Directory xpk copies into the built image (docker_image unset), e.g. the checkout.
    script_dir: Optional[str] = None
    # Kueue priority: very-low | low | medium | high | very-high; None = each job's
    # run.priority (a recipe's: MaxText's Pathways recipes say high), else medium.
    priority: Optional[str] = None
    num_slices: int = 1  # TPU slices per workload (multislice when > 1)
    max_restarts: int = 0  # JobSet restarts on failure; > 0 only if the job resumes
    program: str = "python -m rlexp"  # the container's program; the job's resolved overrides follow
    # Environment of the container, e.g. {MLFLOW_TRACKING_URI: http://mlflow:5000}.
    env: Dict[str, str] = field(default_factory=dict)
    # Launching-process env vars given to every workload, never on a command line or in output
    # (e.g. [HF_TOKEN]): xpk --env-file names them, takes values from its environment (dry run
    # shows HF_TOKEN=***). Each must be set and secret-named (..._TOKEN, ..._KEY): rlexp masks it.
    secrets: List[str] = field(default_factory=list)
    # The same for the ones that are set here, skipped when not: the Hugging Face token that
    # gated weights (Llama's) need.
    secrets_if_set: List[str] = field(default_factory=lambda: ["HF_TOKEN"])
    # Further xpk flags, appended verbatim (e.g. ["--spot"]).
    extra_args: List[str] = field(default_factory=list)
    dry_run: bool = False  # xpk --dry-run: print the gcloud/kubectl commands, create nothing
    # Project and zone for xpk --dry-run when none is configured: xpk 1.16's offline dry run
    # crashes without a zone (zone_to_region(None)) and prints project=None without a project.
    dry_run_project: str = "dry-run-project"
    dry_run_zone: str = "us-central1-a"
    workload_prefix: str = "rlexp"  # start of each workload name (<= 40 chars, [a-z0-9-])
    max_parallel: int = 4  # xpk calls in flight (each waits on gcloud/kubectl round trips)
    timeout_s: int = 900  # seconds one xpk call may take before the job counts as failed to submit
    # Print xpk's whole output (dry run: the manifests too); it is always saved in
    # <sweep dir>/xpk/<workload>.log.
    verbose: bool = False


ConfigStore.instance().store(group="hydra/launcher", name="xpk", node=XpkLauncherConf,
                             provider="rlexp_xpk_launcher")
