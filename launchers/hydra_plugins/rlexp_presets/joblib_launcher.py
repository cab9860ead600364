"""Hydra's joblib launcher, with its workers forked from a process that imported rlexp's
engine once, while Hydra prepares.

A worker's first job imports JAX, Tunix, Flax, orbax, MLflow and matplotlib before it
trains: 4.5 s alone on a 2-core CPU, 5.6 s when two loky workers and the launching process
(rlexp's pre-flight, Hydra's composition, the sweep's MLflow parent run) import at once. So
the workers come from a fork server (multiprocessing.forkserver) whose preload imports all
that once (_preload.py); each worker is a fork of it, with the modules in memory it shares.
The server starts as early as the launching process knows the sweep's launcher: before
pre-flight when the command line names it (rlexp.launch.fast_start.start_fork_server_early), else right
after (rlexp.launch.preflight.before_launch -> start_warm_up) or, at the latest, in this launcher's
setup(). The workers live in loky's reusable executor, which joblib then reuses for the jobs
(same arguments, same executor: joblib/executor.py); launch() waits for them, so a job never
races the warm-up. Where there is no fork server (Windows), or it fails to start, the
workers are loky's own and import for themselves.

Measured, 8 tiny jobs on 2 workers (2-core CPU): the first jobs start 5.4-5.9 s after the
command instead of 8.0 s, and a worker's later jobs no longer walk (and copy) the preloaded
heap in a full garbage collection (rlexp.base.runtime.frozen_heap: 1.0 -> 0.07 s a job).

Workers inherit the environment of the moment the fork server starts, which may be before
rlexp set the platform variables; each job sets its own (rlexp.planning.hardware.setup_platform,
which also sets jax_platforms, read when JAX was imported) before JAX starts a backend.

What the sweep shows (rlexp.job.console): each job's lines carry its label
(`[3/8 beta=0.04 G=4]`); the workers, which may have forked before the sweep was known, get
the labels' inputs and the dir of their events with each job (execute_job's `env`). This
process watches those events (SweepMonitor): on a terminal it draws the only bar, with the
jobs' lines printed above it; piped, one line per finished job. The plugin's
`Joblib.Parallel(n_jobs=2, backend=loky, ...)` line is dropped.

With RLEXP_FAST_START=0 (rlexp.base.runtime.fast_start_enabled) this is the plugin's own
launcher: no fork server, no warm-up, Hydra's execute_job as it is (its workers, started
by the launch, inherit the labels' environment). The private names of
loky, multiprocessing and the plugin used here are listed, and checked, in
rlexp.base.private_apis.
"""

from __future__ import annotations

import functools
import logging
import os
import sys
import threading
from typing import Any, Sequence

from hydra.core.utils import JobReturn
from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher
from omegaconf import DictConfig

log = logging.getLogger(__name__)

# The fork server's preload: this module imports what every job needs (_preload.MODULES).
PRELOAD = "hydra_plugins.rlexp_presets._preload"

# What the sweep's end imports in this process, which runs no job itself (the parent run's
# table and comparison.png: rlexp.tracking.callback): 0.4 s, imported while workers start.
SWEEP_END_MODULES = ("rlexp.tracking.compare", "matplotlib.backends.backend_agg",
                     "matplotlib.figure")


# loky replaces a worker whose RSS grew 300 MB past its size after its first task
# (joblib/externals/loky/process_executor.py, a private global: rlexp.base.private_apis).
# After a warm-up, the first real job (JAX's backend, compiled programs, the model:
# +0.5-1 GB for tiny) would count as a leak and the warm worker would be swapped for a cold
# one; rlexp's jobs free their memory when they end, so the allowance is raised to this.
LEAK_ALLOWANCE = 4 << 30


def import_engine(modules: Sequence[str] = (PRELOAD,)) -> int:
    """Runs in a worker: import what a job needs (nothing is initialised; a worker forked
    from the fork server has it already), and end the worker quickly when the sweep is over
    (exit_now); returns the pid."""
    import atexit
    import os

    from joblib.externals.loky import process_executor

    process_executor._MAX_MEMORY_LEAK_SIZE = max(process_executor._MAX_MEMORY_LEAK_SIZE,
                                                 LEAK_ALLOWANCE)
    from rlexp.base import runtime

    with runtime.loading(freeze=True):  # the jobs' collections then skip these modules
        runtime.import_all(modules)
    atexit.unregister(exit_now)  # a worker warmed twice registers once
    atexit.register(exit_now)
    return os.getpid()


def exit_now() -> None:
    """A warmed worker's first exit handler (registered after the imports, so it runs
    before theirs): flush and leave with os._exit, as a forked multiprocessing child always
    does (a worker from the fork server leaves that way without it; this is for loky's own
    workers, where there is no fork server). loky's workers otherwise end with sys.exit, and the interpreter then runs JAX's
    handler (clearing every compiled program and backend) and a full garbage collection:
    2.5 s on a 2-core CPU after a tiny job, during which Hydra's process waits for the
    workers before it can exit. By then each job has ended its MLflow run, closed its
    checkpoints and written its summary; handlers a job registered itself still run (they
    are later, so earlier in the exit). The exit code is 0: loky tells a worker that broke
    from one that ended by its exit lock, not its code."""
    import logging
    import os

    from rlexp.base.runtime import flush_std_streams

    logging.shutdown()
    flush_std_streams()
    os._exit(0)


def parallel_kwargs(joblib_cfg: dict[str, Any]) -> dict[str, Any]:
    """The joblib.Parallel arguments Hydra's launch() will use (hydra_joblib_launcher/_core.py),
    so the executor made here is the one it reuses."""
    from hydra_plugins.hydra_joblib_launcher._core import process_joblib_cfg

    cfg = dict(joblib_cfg)
    cfg["backend"] = "loky"
    process_joblib_cfg(cfg)
    return cfg


# The warm-up of this process's workers, started once (by rlexp's entry point or by setup()).
_warm_up: threading.Thread | None = None


def start_warm_up(joblib_cfg: dict[str, Any], extra: Sequence[str] = ()) -> None:
    """Start the workers Hydra's launch() will use, with rlexp's engine (and the `extra`
    modules) imported, on a thread."""
    global _warm_up
    if _warm_up is None:
        _warm_up = threading.Thread(target=_warm_workers,
                                    args=(dict(joblib_cfg), (PRELOAD, *extra)),
                                    name="rlexp-joblib-warm-up", daemon=True)
        _warm_up.start()


def wait_warm_up() -> None:
    if _warm_up is not None:
        _warm_up.join()


def use_fork_server() -> bool:
    """Make loky start this process's workers from a fork server that imports PRELOAD first.
    loky takes its start method from one process-wide default (the executor joblib makes is
    given no context; rlexp.base.private_apis): this launcher is the only user of it in an
    rlexp command."""
    import multiprocessing
    import multiprocessing.forkserver

    from joblib.externals.loky.backend import context

    if "forkserver" not in multiprocessing.get_all_start_methods():
        return False
    multiprocessing.forkserver.set_forkserver_preload([PRELOAD])
    context.set_start_method("forkserver", force=True)
    return True


def start_fork_server() -> None:
    """Start the fork server now; it imports in the background while this process goes on
    (the first worker to start waits for it). rlexp's entry point calls this before
    pre-flight when the command line names this launcher."""
    import multiprocessing.forkserver

    try:
        if use_fork_server():
            multiprocessing.forkserver.ensure_running()
    except Exception as exc:  # the workers are then loky's own
        log.debug("no fork server: %s", exc)
        _loky_default()


def _loky_default() -> None:
    from joblib.externals.loky.backend import context

    context.set_start_method(None, force=True)


def _warm_workers(joblib_cfg: dict[str, Any], modules: Sequence[str] = (PRELOAD,)) -> None:
    from joblib import Parallel, delayed, effective_n_jobs

    kwargs = parallel_kwargs(joblib_cfg)
    workers = effective_n_jobs(kwargs.get("n_jobs", -1))
    forked = False
    try:
        forked = use_fork_server()
        pids = Parallel(**kwargs)(delayed(import_engine)(modules) for _ in range(workers))
        log.debug("joblib workers warmed (fork server: %s): %s", forked, sorted(set(pids)))
    except Exception as exc:  # the jobs then run in loky's own workers, importing for
        log.debug("joblib warm-up skipped: %s", exc)  # themselves, as without a warm-up
        if forked:
            _loky_default()


def with_this_workers_plugins(singleton_state: dict[str, Any]) -> dict[str, Any]:
    """Hydra's singleton state for a job, plus this process's plugin registry (discovered
    here for a worker's first job, as Singleton.set_state would). set_state leaves the
    registry out and rediscovers every plugin (importing each hydra_plugins module) for every
    job a worker runs: 0.35 s for a worker's first job, ~0.1 s for each one after
    (hydra/core/singleton.py)."""
    from hydra.core.plugins import Plugins

    plugins = Plugins.instance()
    return {**singleton_state, "instances": {**singleton_state["instances"], Plugins: plugins}}


def execute_job(idx: int, overrides: Sequence[str], hydra_context: HydraContext,
                config: DictConfig, task_function: TaskFunction,
                singleton_state: dict[str, Any], env: dict[str, str] | None = None) -> JobReturn:
    """Runs in a worker: Hydra's execute_job (hydra_joblib_launcher/_core.py), keeping the
    worker's plugin registry from one job to the next; `env` (the sweep's size, swept keys
    and event dir: rlexp.job.console.SweepEnv) is set first."""
    from hydra_plugins.hydra_joblib_launcher import _core

    os.environ.update(env or {})
    hydra_execute_job = _hydra_functions.get("execute_job", _core.execute_job)
    return hydra_execute_job(idx, overrides, hydra_context, config, task_function,
                             with_this_workers_plugins(singleton_state))


# Hydra's own functions this launcher stands in for while it launches (in this process only).
_hydra_functions: dict[str, Any] = {}


class _DropParallelLine(logging.Filter):
    """The plugin logs its joblib.Parallel arguments at every launch: nothing to act on."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not str(record.msg).startswith("Joblib.Parallel(")


def quiet_parallel_line() -> None:
    core = logging.getLogger("hydra_plugins.hydra_joblib_launcher._core")
    if not any(isinstance(f, _DropParallelLine) for f in core.filters):
        core.addFilter(_DropParallelLine())


def sweep_env(job_overrides: Sequence[Sequence[str]], initial_job_idx: int,
              relay: Any, terminal: bool) -> dict[str, str]:
    """What each job needs to label its lines and report to this process: the sweep's size
    and swept keys as rlexp's entry point found them (else this batch's: the keys whose
    values differ), and the monitor's event dir."""
    from rlexp.job.console import SweepEnv

    known = SweepEnv.from_env()
    size = known.size or initial_job_idx + len(job_overrides)
    keys = known.keys
    if not keys:
        values: dict[str, set[str]] = {}
        for job in job_overrides:
            for override in job:
                key, _, value = override.lstrip("+~").partition("=")
                values.setdefault(key, set()).add(value)
        keys = [k for k, v in values.items() if len(v) > 1 and not k.startswith("hydra")]
    return SweepEnv(size=size, keys=keys, relay=relay, terminal=terminal).to_env()


class RlexpJoblibLauncher(JoblibLauncher):
    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        from rlexp.base.runtime import fast_start_enabled

        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        if fast_start_enabled():
            start_warm_up(self.joblib)  # a no-op when the entry point started it

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        from joblib import effective_n_jobs

        from rlexp.base.runtime import fast_start_enabled, import_all
        from rlexp.job import console, sweep_monitor

        quiet_parallel_line()
        terminal = console.is_terminal(sys.stderr)
        probe = sweep_env(job_overrides, initial_job_idx, None, terminal)
        size = int(probe[console.SWEEP_SIZE_ENV])
        workers = min(effective_n_jobs(self.joblib.get("n_jobs", -1)), size)
        monitor = sweep_monitor.sweep_monitor(size, workers)
        env = sweep_env(job_overrides, initial_job_idx, monitor.relay, terminal)
        if not fast_start_enabled():  # the plugin's launch, as it is
            os.environ.update(env)  # its workers start now, with this environment
            return self._watched(monitor, job_overrides, initial_job_idx)

        threading.Thread(target=import_all, args=(SWEEP_END_MODULES,), daemon=True,
                         name="rlexp-sweep-end-imports").start()
        wait_warm_up()
        from hydra_plugins.hydra_joblib_launcher import _core

        original = _hydra_functions.setdefault("execute_job", _core.execute_job)
        # what Hydra's launch() sends to the workers, with the sweep's environment
        _core.execute_job = functools.partial(execute_job, env=env)
        try:
            return self._watched(monitor, job_overrides, initial_job_idx)
        finally:
            _core.execute_job = original

    def _watched(self, monitor: Any, job_overrides: Sequence[Sequence[str]],
                 initial_job_idx: int) -> Sequence[JobReturn]:
        from hydra.core.utils import JobStatus

        results: dict[int, bool] = {}
        try:
            runs = super().launch(job_overrides, initial_job_idx)
            results = {initial_job_idx + i: r.status == JobStatus.COMPLETED
                       for i, r in enumerate(runs)}
            return runs
        finally:
            monitor.finish(results or {initial_job_idx + i: False
                                       for i in range(len(job_overrides))})
