"""Hydra's joblib launcher, with its workers importing rlexp's engine while Hydra prepares.

A loky worker's first job imports JAX, Tunix, Flax, orbax, MLflow and transformers (6.2 s on
a 2-core CPU) before it trains; meanwhile the launching process was idle. Between this
launcher's setup and its launch Hydra opens the sweep's MLflow parent (store and schema,
~6 s on a new store) and composes every job once more (~0.4 s a job), so setup() starts the
workers and their imports right away, in loky's reusable executor, which joblib then reuses
for the jobs (same arguments, same executor: joblib/executor.py). launch() waits for the
warm-up, so a job never races it.

Workers inherit the environment of the moment they start: setup() runs after rlexp set the
platform variables (XLA_FLAGS for emulated devices, the GPU memory fraction) for the jobs.
"""

from __future__ import annotations

import logging
import threading
from typing import Any, Sequence

from hydra.core.utils import JobReturn
from hydra.types import HydraContext, TaskFunction
from hydra_plugins.hydra_joblib_launcher.joblib_launcher import JoblibLauncher
from omegaconf import DictConfig

log = logging.getLogger(__name__)

# What a job imports before its first step, heaviest first.
WARM_MODULES = ("rlexp.engine", "rlexp.engine.tunix_adapter", "orbax.checkpoint",
                "rlexp.experiment", "rlexp.tracking.listener", "mlflow", "transformers",
                "safetensors.numpy")


# loky replaces a worker whose RSS grew 300 MB past its size after its first task
# (joblib/externals/loky/process_executor.py, _MAX_MEMORY_LEAK_SIZE). After a warm-up, the
# first real job (JAX's backend, compiled programs, the model: +0.5-1 GB for tiny) would
# count as a leak and the warm worker would be swapped for a cold one; rlexp's jobs free
# their memory when they end, so the allowance is raised to this.
LEAK_ALLOWANCE = 4 << 30


def import_engine(modules: Sequence[str] = WARM_MODULES) -> int:
    """Runs in a worker: import what a job needs (nothing is initialised); returns the pid."""
    import importlib
    import os

    from joblib.externals.loky import process_executor

    process_executor._MAX_MEMORY_LEAK_SIZE = max(process_executor._MAX_MEMORY_LEAK_SIZE,
                                                 LEAK_ALLOWANCE)
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # a warm-up never fails a sweep: the job reports a real problem
            pass
    return os.getpid()


def parallel_kwargs(joblib_cfg: dict[str, Any]) -> dict[str, Any]:
    """The joblib.Parallel arguments Hydra's launch() will use (hydra_joblib_launcher/_core.py),
    so the executor made here is the one it reuses."""
    from hydra_plugins.hydra_joblib_launcher._core import process_joblib_cfg

    cfg = dict(joblib_cfg)
    cfg["backend"] = "loky"
    process_joblib_cfg(cfg)
    return cfg


class RlexpJoblibLauncher(JoblibLauncher):
    def setup(self, *, hydra_context: HydraContext, task_function: TaskFunction,
              config: DictConfig) -> None:
        super().setup(hydra_context=hydra_context, task_function=task_function, config=config)
        self._warm = threading.Thread(target=self._warm_workers, name="rlexp-joblib-warm-up",
                                      daemon=True)
        self._warm.start()

    def _warm_workers(self) -> None:
        try:
            from joblib import Parallel, delayed, effective_n_jobs

            kwargs = parallel_kwargs(self.joblib)
            workers = effective_n_jobs(kwargs.get("n_jobs", -1))
            pids = Parallel(**kwargs)(delayed(import_engine)() for _ in range(workers))
            log.debug("joblib workers warmed: %s", sorted(set(pids)))
        except Exception as exc:  # the jobs then import for themselves, as without a warm-up
            log.debug("joblib warm-up skipped: %s", exc)

    def launch(self, job_overrides: Sequence[Sequence[str]],
               initial_job_idx: int) -> Sequence[JobReturn]:
        warm = getattr(self, "_warm", None)
        if warm is not None:
            warm.join()
        return super().launch(job_overrides, initial_job_idx)
