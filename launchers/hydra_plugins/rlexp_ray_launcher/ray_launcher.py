"""Hydra launcher that runs every job of a sweep as Ray tasks on a running Ray cluster.

Each process of a job is one Ray task in a fresh worker process (max_calls=1: JAX's backend,
its flags and jax.distributed belong to that process alone) that runs the job the way
hydra-submitit-launcher does: the launching process's Hydra singletons, the job's sweep
config, hydra.core.utils.run_job. A multi-controller job (hardware.runtime=multi_controller,
hardware.hosts=N) is N tasks in one placement group, PACKed on one node for CPU profiles
(cpu-2host: virtual hosts) and STRICT_SPREAD over N nodes otherwise; a first small task in
bundle 0 picks the coordinator's address, and each task is given it with its index through
JAX's own variables (JAX_COORDINATOR_ADDRESS, JAX_NUM_PROCESSES, JAX_PROCESS_ID). The job's
result is process 0's.
"""

# No `from __future__ import annotations`: see config.py.
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence

from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

log = logging.getLogger(__name__)

# JAX's variables for an explicit multi-controller start (jax/_src/distributed.py reads
# JAX_COORDINATOR_ADDRESS; rlexp.planning.hardware the count and the index).
COORDINATOR_ENV, COUNT_ENV, INDEX_ENV = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES",
                                         "JAX_PROCESS_ID")


@dataclass(frozen=True)
class Layout:
    """The processes of one job and what each asks Ray for."""

    processes: int
    cpus: float
    gpus: float
    # Placement group strategy for processes > 1.
    strategy: str


def job_layout(params: Dict[str, Any], job_cfg: DictConfig) -> Layout:
    """One process, or one per host under hardware.runtime=multi_controller (not emulated)."""
    hw = OmegaConf.select(job_cfg, "hardware", default=None)
    sel = (lambda key, default: OmegaConf.select(hw, key, default=default)) if hw is not None \
        else (lambda key, default: default)
    hosts = int(sel("hosts", 1) or 1)
    multi = hosts > 1 and not sel("emulate", False) and sel("runtime", "single") == "multi_controller"
    cpus = params.get("cpus_per_task")
    gpus = params.get("gpus_per_task")
    return Layout(processes=hosts if multi else 1,
                  cpus=float(cpus if cpus is not None else sel("cpus_per_task", 1) or 1),
                  gpus=float(gpus if gpus is not None else sel("gpus_per_node", 0) or 0),
                  strategy="PACK" if sel("platform", "cpu") == "cpu" else "STRICT_SPREAD")


def process_env(coordinator: Optional[str], count: int, index: int) -> Dict[str, str]:
    """The environment that makes process `index` of `count` join the job's others."""
    if count <= 1 or coordinator is None:
        return {}
    return {COORDINATOR_ENV: coordinator, COUNT_ENV: str(count), INDEX_ENV: str(index)}


def _coordinator_address() -> str:
    """This node's address and a port free on it now (run in the job's bundle 0)."""
    import socket

    import ray

    host = ray.util.get_node_ip_address()
    with socket.socket() as s:
        s.bind((host, 0))
        return f"{host}:{s.getsockname()[1]}"


def _run_process(launcher: "RlexpRayLauncher", overrides: List[str], job_num: int,
                 singleton_state: Dict[Any, Any], cwd: str, env: Dict[str, str],
                 coordinator: Optional[str], count: int, index: int) -> JobReturn:
    """One process of one job, inside its Ray worker."""
    from hydra.core.utils import run_job, setup_globals

    os.environ.update(env)
    os.environ.update(process_env(coordinator, count, index))
    if os.path.isdir(cwd):  # a shared filesystem: relative outputs/ is the sweep's
        os.chdir(cwd)
    Singleton.set_state(singleton_state)
    setup_globals()
    assert launcher.hydra_context is not None and launcher.config is not None
    sweep_config = launcher.hydra_context.config_loader.load_sweep_config(launcher.config,
                                                                          overrides)
    with open_dict(sweep_config.hydra.job):
        sweep_config.hydra.job.id = f"ray_{job_num}_{index}"
        sweep_config.hydra.job.num = job_num
    assert launcher.task_function is not None
    return run_job(hydra_context=launcher.hydra_context, task_function=launcher.task_function,
                   config=sweep_config, job_dir_key="hydra.sweep.dir",
                   job_subdir_key="hydra.sweep.subdir")


class RlexpRayLauncher(Launcher):
    def __init__(self, **params: Any) -> None:
        self.params = {k: OmegaConf.to_container(v, resolve=True) if OmegaConf.is_config(v)
                       else v for k, v in params.items()}
        self.config: Optional[DictConfig] = None
        self.hydra_context: Optional[HydraContext] = None
        self.task_function: Optional[TaskFunction] = None

    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        self.config = config
        self.hydra_context = hydra_context
        self.task_function = task_function

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        import ray  # lazy: plugin discovery must stay fast
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy

        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        address = str(self.params["address"])
        if not ray.is_initialized():
            ray.init(address=address, log_to_driver=True, logging_level=logging.WARNING)
        log.info(f"Ray launcher: {len(job_overrides)} job(s) on {address}, sweep dir "
                 f"{sweep_dir}")

        # The sweep's store and parent run reach every process (as the SLURM launcher does).
        from rlexp.tracking.remote_jobs import ENV_JOBS, job_env

        env = job_env(sweep_dir, len(job_overrides))
        env.pop(ENV_JOBS, None)  # this process waits for the jobs and closes the parent
        # What the workers need to import rlexp and the plugins where they are not installed.
        env.update({k: os.environ[k] for k in ("PYTHONPATH",) if os.environ.get(k)})
        # max_retries=0: Ray re-runs a task whose worker died (3 times by default), which
        # would start one process of a multi-controller job again against peers that are gone.
        run = ray.remote(max_calls=1, max_retries=0)(_run_process)
        probe = ray.remote(num_cpus=0)(_coordinator_address)
        state = Singleton.get_state()
        cwd = os.getcwd()

        started = []  # per job: (overrides, [refs], placement group or None, timeout)
        for i, overrides in enumerate(job_overrides):
            idx = initial_job_idx + i
            job_cfg = self.hydra_context.config_loader.load_sweep_config(self.config,
                                                                         list(overrides))
            lay = job_layout(self.params, job_cfg)
            timeout = self.params.get("timeout_s") or 60 * int(
                OmegaConf.select(job_cfg, "hardware.timeout_min", default=60) or 60)
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))} "
                     f"({lay.processes} process(es), {lay.cpus:g} CPU, {lay.gpus:g} GPU each)")
            opts: Dict[str, Any] = {"num_cpus": lay.cpus, "num_gpus": lay.gpus}
            if env:  # set before the worker imports anything (JAX reads its flags once)
                opts["runtime_env"] = {"env_vars": env}
            if lay.processes == 1:
                refs = [run.options(**opts).remote(self, list(overrides), idx, state, cwd, env,
                                                   None, 1, 0)]
                started.append((overrides, refs, None, timeout))
                continue
            bundle = {"CPU": lay.cpus, **({"GPU": lay.gpus} if lay.gpus else {})}
            pg = placement_group([dict(bundle) for _ in range(lay.processes)],
                                 strategy=lay.strategy)
            coordinator = probe.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=0)).remote()
            refs = [run.options(**opts, scheduling_strategy=PlacementGroupSchedulingStrategy(
                        pg, placement_group_bundle_index=p)).remote(
                        self, list(overrides), idx, state, cwd, env, coordinator,
                        lay.processes, p)
                    for p in range(lay.processes)]
            started.append((overrides, refs, pg, timeout))

        results = []
        for overrides, refs, pg, timeout in started:
            results.append(self._collect(list(overrides), refs, timeout))
            if pg is not None:
                remove_placement_group(pg)
        return results

    def _collect(self, overrides: List[str], refs: List[Any], timeout: float) -> JobReturn:
        """Process 0's JobReturn; a process Ray lost (or the timeout) fails the job."""
        import ray

        deadline = time.monotonic() + timeout
        outs: List[Any] = []
        for ref in refs:
            try:
                outs.append(ray.get(ref, timeout=max(1.0, deadline - time.monotonic())))
            except Exception as exc:  # noqa: BLE001 - a lost worker, a timeout: the job failed
                outs.append(exc)
        first = outs[0]
        bad = next((o for o in outs if not isinstance(o, JobReturn)), None)
        if isinstance(first, JobReturn) and bad is None:
            return first
        ret = first if isinstance(first, JobReturn) else JobReturn(overrides=overrides)
        if bad is not None:
            for ref in refs:
                ray.cancel(ref, force=True)
            ret.status = JobStatus.FAILED
            ret.return_value = RuntimeError(f"Ray process {outs.index(bad)} of {len(refs)}: "
                                            f"{type(bad).__name__}: {str(bad)[-500:]}")
        return ret
