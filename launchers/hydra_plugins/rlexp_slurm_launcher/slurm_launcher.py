"""Submitit launchers whose resources come from each job's `hardware` group. hydra-submitit-launcher
submits the sweep as one job array of one executor, instantiated from the sweep's primary config: a
preset interpolating `${hardware.cpus_per_task}` gives every job the first job's resources
(measured: `hardware=a,b` with 1 and 2 CPUs both ran with SLURM_CPUS_PER_TASK=1). Here each job's
config is composed first (cheap, no JAX) and jobs are grouped by the resources their hardware asks
for (cpus_per_task, gpus_per_node, timeout_min, partition; nodes and tasks per node from
job_layout), one job array per group. The rest (pickled job, run_job, requeue on timeout) is
hydra-submitit-launcher's own code."""

# No `from __future__ import annotations`: see config.py.
import logging
import os
from pathlib import Path
from typing import Any, Dict, List, Sequence, Tuple

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, filter_overrides
from omegaconf import DictConfig, OmegaConf

try:
    from hydra_plugins.hydra_submitit_launcher.config import BaseQueueConf
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import BaseSubmititLauncher
except ImportError:  # pragma: no cover - the `slurm` extra is not installed
    BaseSubmititLauncher = None  # type: ignore[assignment,misc]

log = logging.getLogger(__name__)


def job_resources(params: Dict[str, Any], job_cfg: DictConfig,
                  keys: Sequence[str]) -> Dict[str, Any]:
    """Resources of one job: the launcher's value when set, else the job's hardware.<key>."""
    out: Dict[str, Any] = {}
    for key in keys:
        value = params.get(key)
        if value is None:
            value = OmegaConf.select(job_cfg, f"hardware.{key}", default=None)
        # --gpus-per-node=0 is rejected by a cluster without GPU gres: ask for none instead.
        if key == "gpus_per_node" and value == 0:
            value = None
        out[key] = value
    return out


def job_layout(params: Dict[str, Any], job_cfg: DictConfig) -> Dict[str, int]:
    """SLURM nodes and tasks per node of one job (the launcher's nodes / tasks_per_node win):
    multi_controller runs one process per host as srun tasks joined by jax.distributed through
    SLURM's variables (jax/_src/clusters/slurm_cluster.py); a node per real host, CPU "hosts"
    (cpu-2host) on one node. Else one."""
    hw = OmegaConf.select(job_cfg, "hardware", default=None)
    hosts = int(OmegaConf.select(hw, "hosts", default=1) or 1) if hw is not None else 1
    multi = (hw is not None and hosts > 1 and not OmegaConf.select(hw, "emulate", default=False)
             and OmegaConf.select(hw, "runtime", default="single") == "multi_controller")
    if not multi:
        nodes, per_node = 1, 1
    elif OmegaConf.select(hw, "platform", default="cpu") == "cpu":
        nodes, per_node = 1, hosts
    else:
        nodes, per_node = hosts, 1
    return {"nodes": params.get("nodes") or nodes,
            "tasks_per_node": params.get("tasks_per_node") or per_node}


if BaseSubmititLauncher is not None:

    class _PerJobResources(BaseSubmititLauncher):
        _RESOURCE_KEYS: Tuple[str, ...] = ()  # which hardware keys this executor understands

        def launch(self, job_overrides: Sequence[Sequence[str]],
                   initial_job_idx: int) -> Sequence[JobReturn]:
            import submitit  # lazy: plugin discovery must stay fast
            assert self.config is not None and self.hydra_context is not None
            num_jobs = len(job_overrides)
            assert num_jobs > 0
            sweep_dir = Path(str(self.config.hydra.sweep.dir))
            sweep_dir.mkdir(parents=True, exist_ok=True)
            if "mode" in self.config.hydra.sweep:
                os.chmod(sweep_dir, mode=int(str(self.config.hydra.sweep.mode), 8))
            log.info(f"Submitit '{self._EXECUTOR}' sweep output dir : {sweep_dir}")

            # Group jobs by the resources their own config asks for (order kept per group).
            groups: Dict[Tuple[Tuple[str, Any], ...], List[int]] = {}
            for i, overrides in enumerate(job_overrides):
                job_cfg = self.hydra_context.config_loader.load_sweep_config(
                    self.config, list(overrides))
                res = job_resources(self.params, job_cfg, self._RESOURCE_KEYS)
                if self._EXECUTOR == "slurm":  # processes per job (srun's tasks)
                    res.update(job_layout(self.params, job_cfg))
                groups.setdefault(tuple(sorted(res.items())), []).append(i)

            # Each job gets the sweep's store and parent run in its environment (sbatch and the
            # local executor pass it on), so it nests even where parent_run.json is unreadable.
            from rlexp.tracking.remote_jobs import job_env
            os.environ.update(job_env(sweep_dir, None))  # no job count: we close the parent

            base_keys = set(OmegaConf.structured(BaseQueueConf).keys())
            init_keys = {"submitit_folder", "max_num_timeout"}
            jobs: List[Any] = [None] * num_jobs
            for resources, members in groups.items():
                params = {**self.params, **dict(resources)}
                init = {"folder": params["submitit_folder"]}
                if "max_num_timeout" in params:
                    init[f"{self._EXECUTOR}_max_num_timeout"] = params["max_num_timeout"]
                executor = submitit.AutoExecutor(cluster=self._EXECUTOR, **init)
                executor.update_parameters(**{k if k in base_keys else f"{self._EXECUTOR}_{k}": v
                                              for k, v in params.items() if k not in init_keys})
                shown = ", ".join(f"{k}={v}" for k, v in resources if v is not None) or "defaults"
                log.info(f"  {len(members)} job(s) with {shown}")
                job_params = []
                for i in members:
                    idx = initial_job_idx + i
                    log.info(f"\t#{idx} : {' '.join(filter_overrides(job_overrides[i]))}")
                    job_params.append((list(job_overrides[i]), "hydra.sweep.dir", idx,
                                       f"job_id_for_{idx}", Singleton.get_state()))
                for i, job in zip(members, executor.map_array(self, *zip(*job_params))):
                    jobs[i] = job
            return [j.results()[0] for j in jobs]

    class RlexpSlurmLauncher(_PerJobResources):
        _EXECUTOR = "slurm"
        _RESOURCE_KEYS = ("cpus_per_task", "gpus_per_node", "timeout_min", "partition")

    class RlexpLocalLauncher(_PerJobResources):
        _EXECUTOR = "local"
        _RESOURCE_KEYS = ("cpus_per_task", "gpus_per_node", "timeout_min")
