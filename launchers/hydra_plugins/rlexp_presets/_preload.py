"""Imported once, by a joblib sweep's fork server (multiprocessing.forkserver), before it
forks the workers: everything a job loads before its first step, so each worker starts with
it in memory and does not import it again. Private (leading underscore): Hydra's plugin scan
skips it, so no other process imports JAX through it.

Nothing here starts a thread or JAX's backend: a fork copies only the forking thread, and
JAX's backend is not fork-safe once initialised (jax/_src/xla_bridge.py warns at fork).
"""

from __future__ import annotations

import os

from rlexp.base import runtime

# What a job imports before its first step, heaviest first. MLflow's SQL store and
# matplotlib's Agg canvas are imported by a job's tracking thread (store open, the run's
# curves at the end). A sweep with a Hugging Face tokenizer has each worker import
# transformers as it starts (rlexp.launch.fast_start.start_workers): the fork server may be running
# before pre-flight knows the tokenizer.
MODULES = ("rlexp.engine", "rlexp.engine.tunix_adapter", "orbax.checkpoint",
           "rlexp.job.experiment", "rlexp.tracking.listener", "mlflow", "safetensors.numpy",
           "mlflow.store.tracking.sqlalchemy_store", "matplotlib.backends.backend_agg",
           "matplotlib.figure")


def preload(modules: tuple[str, ...] = MODULES) -> None:
    parent = os.getppid()
    with runtime.loading(freeze=True):  # collector paused, then these objects frozen
        for name in modules:
            if os.getppid() != parent:  # the launching process ended (bad input: exit 2)
                os._exit(0)  # before the server's loop would notice it: don't import on
            runtime.import_all([name])
    try:  # the installed Tunix checked once, for every worker (rlexp.engine caches it)
        from rlexp.engine import _check_installed_tunix

        _check_installed_tunix()
    except Exception:  # a mismatch is the first job's one-line error, not the fork server's
        pass


preload()
