"""Hydra launcher that runs every job of a sweep as Ray tasks on a running Ray cluster. Each process
of a job is one Ray task in a fresh worker (max_calls=1: JAX's backend, flags and jax.distributed
belong to that process) running the job as hydra-submitit-launcher does. A multi-controller job
(hardware.hosts=N) is N tasks in one placement group, PACKed on one node for CPU profiles,
STRICT_SPREAD otherwise; a small task in bundle 0 picks the coordinator's address, given to each
task with its index through JAX's own variables. The job's result is process 0's.

TPUs as Ray 2.60 defines them (ray/_private/accelerators/tpu.py, ray/util/tpu.py): each host offers
"TPU" = its chips, its slice's name (1 per host) and, on worker 0 only, "TPU-<pod type>-head". A
multi-host slice is reserved as Ray's SlicePlacementGroup does: a placement group on the head first
(two jobs never share a slice), whose host names the slice, then one bundle per host, STRICT_SPREAD,
each {"CPU", "TPU": chips per host, <slice name>: 1}. A one-host job asks for the head and the chips
in its own task."""

# No `from __future__ import annotations`: see config.py.
import logging
import os
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Tuple

from hydra.core.hydra_config import HydraConfig
from hydra.core.singleton import Singleton
from hydra.core.utils import JobReturn, JobStatus, filter_overrides
from hydra.plugins.launcher import Launcher
from hydra.types import HydraContext, TaskFunction
from omegaconf import DictConfig, OmegaConf, open_dict

from rlexp.base.files import remove_dry_run_dir
from rlexp.base.runtime import COORDINATOR_ENV, COUNT_ENV, INDEX_ENV, environment

log = logging.getLogger(__name__)

# Where a multi-host job's worker bundles get the slice's name before the head is reserved.
SLICE_PLACEHOLDER = "<slice name>"


@dataclass(frozen=True)
class Layout:
    """The processes of one job and what each asks Ray for."""

    processes: int
    cpus: float
    gpus: float
    strategy: str  # placement group strategy for processes > 1
    tpus: float = 0.0  # TPU chips per process (Ray's "TPU" resource); 0 off TPU
    # The slice's head resource ("TPU-v4-64-head") a TPU job reserves first; None off TPU.
    head: Optional[str] = None


def job_layout(params: Dict[str, Any], job_cfg: DictConfig) -> Layout:
    """One process, or one per host with multi_controller (not emulated). On TPU each process
    takes its host's chips and the job its slice's head; a Pathways controller holds no chips."""
    hw = OmegaConf.select(job_cfg, "hardware", default=None)
    sel = (lambda key, default: OmegaConf.select(hw, key, default=default)) if hw is not None \
        else (lambda key, default: default)
    hosts = int(sel("hosts", 1) or 1)
    runtime = sel("runtime", "single")
    emulated = bool(sel("emulate", False))
    multi = hosts > 1 and not emulated and runtime == "multi_controller"
    tpu = sel("platform", "cpu") == "tpu" and not emulated and runtime != "pathways"
    cpus = params.get("cpus_per_task")
    gpus = params.get("gpus_per_task")
    tpus = params.get("tpus_per_task")
    if tpus is None:
        tpus = int(sel("chips", 0) or 0) / hosts if tpu else 0
    return Layout(processes=hosts if multi else 1,
                  cpus=float(cpus if cpus is not None else sel("cpus_per_task", 1) or 1),
                  gpus=float(gpus if gpus is not None else sel("gpus_per_node", 0) or 0),
                  strategy="PACK" if sel("platform", "cpu") == "cpu" else "STRICT_SPREAD",
                  tpus=float(tpus),
                  head=f"TPU-{sel('accelerator_type', None)}-head" if tpu and tpus else None)


def bundles(lay: Layout, slice_name: Optional[str] = None) -> List[Dict[str, float]]:
    """Each process's resources, one bundle per host: a one-process TPU job holds its slice's
    head itself; a multi-host one names the slice its head reservation found."""
    one: Dict[str, float] = {"CPU": lay.cpus}
    one.update({k: v for k, v in (("GPU", lay.gpus), ("TPU", lay.tpus)) if v})
    if lay.head:
        one[lay.head if lay.processes == 1 else slice_name or SLICE_PLACEHOLDER] = 1
    return [dict(one) for _ in range(lay.processes)]


def worker_env(params: Dict[str, Any], environ: Dict[str, str]) -> Dict[str, str]:
    """Every worker's environment: env_from_driver's variables set here, then `env`."""
    out = {k: environ[k] for k in params.get("env_from_driver") or () if environ.get(k)}
    out.update({str(k): str(v) for k, v in (params.get("env") or {}).items()})
    return out


def placement_lines(lay: Layout, env: Dict[str, str], params: Dict[str, Any]) -> List[str]:
    """The dry run's account of one job: how Ray would place it, and the environment names."""
    from rlexp.base.redact import redact_value
    lines = []
    if lay.head and lay.processes > 1:
        lines.append(f"slice head: placement group [{{{lay.head!r}: 1}}] first; its host names "
                     f"the slice ({SLICE_PLACEHOLDER})")
    lines.append(f"placement group {lay.strategy}, {lay.processes} bundles (one per host)"
                 if lay.processes > 1 else "one task, no placement group")
    for i, b in enumerate(bundles(lay)):
        lines.append(f"bundle {i} (host {i}): " + ", ".join(f"{k!r}: {v:g}" for k, v in b.items()))
    if lay.processes > 1:
        lines.append(f"each process: {COORDINATOR_ENV}=<bundle 0's host>:<free port>, "
                     f"{COUNT_ENV}={lay.processes}, {INDEX_ENV}=<its bundle>")
    own = set((params.get("env") or {}))
    # values only for the launcher's own env, secret-named ones masked; names for the rest
    shown = [f"{k}={redact_value(k, v)}" if k in own else k for k, v in sorted(env.items())]
    lines.append("env: " + (", ".join(shown) if shown else "(none)"))
    return lines


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


def _slice_name() -> str:
    """The TPU slice (its name, a resource of each of its hosts) this task's host is in."""
    from ray.util import tpu
    name = tpu.get_current_pod_name()
    if not name:
        raise RuntimeError("the host holding the TPU head resource reports no TPU name")
    return name


def _reserve_slice(head: str, params: Dict[str, Any]) -> Tuple[Any, str]:
    """A placement group on a free slice's head (Ray's reserve_tpu_slice does the same with
    the pod type it infers from a topology) and that slice's name."""
    import ray
    from ray.util.placement_group import placement_group, remove_placement_group
    from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
    pg = placement_group([{head: 1}])
    timeout = float(params.get("slice_timeout_s") or 600)
    ready, _ = ray.wait([pg.ready()], timeout=timeout)
    if not ready:
        remove_placement_group(pg)
        raise TimeoutError(f"no free TPU slice: Ray's {head!r} resource was not free within "
                           f"{timeout:g} s (hydra.launcher.slice_timeout_s)")
    name = ray.get(ray.remote(num_cpus=0)(_slice_name).options(
        scheduling_strategy=PlacementGroupSchedulingStrategy(pg, placement_group_bundle_index=0)
    ).remote())
    return pg, name


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

    def _job(self, overrides: Sequence[str]) -> Tuple[Layout, int]:
        assert self.config is not None and self.hydra_context is not None
        job_cfg = self.hydra_context.config_loader.load_sweep_config(self.config, list(overrides))
        timeout = self.params.get("timeout_s") or 60 * int(
            OmegaConf.select(job_cfg, "hardware.timeout_min", default=60) or 60)
        return job_layout(self.params, job_cfg), int(timeout)

    def _dry_run(self, job_overrides: Sequence[Sequence[str]],
                 initial_job_idx: int) -> Sequence[JobReturn]:
        """Each job's placement, printed; nothing started, the sweep dir Hydra made removed."""
        assert self.config is not None
        env = worker_env(self.params, environment())
        original = HydraConfig.instance().cfg
        out = []
        try:
            for i, overrides in enumerate(job_overrides):
                lay, timeout = self._job(overrides)
                print(f"[ray #{initial_job_idx + i}] {' '.join(filter_overrides(overrides))}: "
                      f"{lay.processes} process(es), timeout {timeout} s (dry run)", flush=True)
                for line in placement_lines(lay, env, self.params):
                    print(f"    {line}", flush=True)
                ret = JobReturn(overrides=list(overrides), working_dir=os.getcwd(),
                                status=JobStatus.COMPLETED)
                ret.return_value = "dry-run"
                out.append(ret)
        finally:
            HydraConfig.instance().cfg = original  # type: ignore[assignment]
        remove_dry_run_dir(Path(str(self.config.hydra.sweep.dir)))
        return out

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        if self.params.get("dry_run"):
            return self._dry_run(job_overrides, initial_job_idx)
        import ray  # lazy: plugin discovery must stay fast
        from ray.util.placement_group import placement_group, remove_placement_group
        from ray.util.scheduling_strategies import PlacementGroupSchedulingStrategy
        assert self.config is not None and self.hydra_context is not None
        sweep_dir = Path(str(self.config.hydra.sweep.dir))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        address = str(self.params["address"])
        if not ray.is_initialized():
            ray.init(address=address, log_to_driver=True, logging_level=logging.WARNING)
        log.info(f"Ray launcher: {len(job_overrides)} job(s) on {address}, sweep dir {sweep_dir}")

        # The sweep's store and parent run reach every process (as the SLURM launcher does).
        from rlexp.tracking.remote_jobs import job_env
        env = job_env(sweep_dir, None)  # no job count: this process closes the parent
        # PYTHONPATH: rlexp and plugins where not installed; RLEXP_MASKED_SECRET: mask_argv's.
        env.update({k: os.environ[k] for k in ("PYTHONPATH", "RLEXP_MASKED_SECRET")
                    if os.environ.get(k)})
        env.update(worker_env(self.params, environment()))  # tokens, caches, launcher env
        # max_retries=0: Ray re-runs a task whose worker died (3 times by default), which
        # would start one process of a multi-controller job again against peers that are gone.
        run = ray.remote(max_calls=1, max_retries=0)(_run_process)
        probe = ray.remote(num_cpus=0)(_coordinator_address)
        state = Singleton.get_state()
        cwd = os.getcwd()

        started = []  # per job: (overrides, [refs] or its failed JobReturn, [groups], timeout)
        for i, overrides in enumerate(job_overrides):
            idx = initial_job_idx + i
            lay, timeout = self._job(overrides)
            log.info(f"\t#{idx} : {' '.join(filter_overrides(overrides))} "
                     f"({lay.processes} process(es), {lay.cpus:g} CPU, {lay.gpus:g} GPU"
                     + (f", {lay.tpus:g} TPU" if lay.tpus else "") + " each)")
            opts: Dict[str, Any] = {"num_cpus": lay.cpus, "num_gpus": lay.gpus}
            if lay.tpus:  # Ray then sets the worker's TPU_VISIBLE_CHIPS
                opts["resources"] = {"TPU": lay.tpus}
            if env:  # set before the worker imports anything (JAX reads its flags once)
                opts["runtime_env"] = {"env_vars": env}
            if lay.processes == 1:  # its task holds the chips and the slice's head itself
                opts["resources"] = {k: v for k, v in bundles(lay)[0].items()
                                     if k not in ("CPU", "GPU")}
                refs = [run.options(**opts).remote(self, list(overrides), idx, state, cwd, env,
                                                   None, 1, 0)]
                started.append((overrides, refs, [], timeout))
                continue
            groups, slice_name = [], None
            if lay.head:
                try:
                    head_pg, slice_name = _reserve_slice(lay.head, self.params)
                except Exception as exc:  # noqa: BLE001 - no free slice: this job fails
                    failed = JobReturn(overrides=list(overrides), status=JobStatus.FAILED)
                    failed.return_value = RuntimeError(str(exc))
                    started.append((overrides, failed, [], timeout))
                    continue
                groups.append(head_pg)
            pg = placement_group(bundles(lay, slice_name), strategy=lay.strategy)
            groups.append(pg)
            coordinator = probe.options(scheduling_strategy=PlacementGroupSchedulingStrategy(
                pg, placement_group_bundle_index=0)).remote()
            refs = [run.options(**opts, scheduling_strategy=PlacementGroupSchedulingStrategy(
                        pg, placement_group_bundle_index=p)).remote(
                        self, list(overrides), idx, state, cwd, env, coordinator,
                        lay.processes, p)
                    for p in range(lay.processes)]
            started.append((overrides, refs, groups, timeout))

        results = []
        for overrides, refs, groups, timeout in started:
            results.append(refs if isinstance(refs, JobReturn)
                           else self._collect(list(overrides), refs, timeout))
            for group in groups:
                remove_placement_group(group)
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
        bad = next((o for o in outs if not isinstance(o, JobReturn)), None)
        if bad is None:
            return outs[0]
        for ref in refs:
            ray.cancel(ref, force=True)
        ret = outs[0] if isinstance(outs[0], JobReturn) else JobReturn(overrides=overrides)
        ret.status = JobStatus.FAILED
        ret.return_value = RuntimeError(f"Ray process {outs.index(bad)} of {len(refs)}: "
                                        f"{type(bad).__name__}: {str(bad)[-500:]}")
        return ret
