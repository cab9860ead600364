"""What an rlexp process does with Python's own machinery: the cyclic garbage collector while
it imports and while a job runs, and how a finished command leaves; and the one switch for
every start-up shortcut (fast_start_enabled), with what pre-flight already checked.

Measured on a 2-core CPU with gc.callbacks, one tiny run (16.7 s): full collections took
2.2 s, 1.9 s of it while JAX, Flax, Tunix and MLflow were imported (each full pass walks
every object loaded so far, and the heap grows to ~570k objects); after the run, the
interpreter's own teardown (module dicts, a last full collection, XLA's objects) took another
1.1-1.8 s before the shell got its prompt back.
"""

from __future__ import annotations

import gc
import importlib
import os
import sys
from contextlib import contextmanager
from typing import Iterable, Iterator, Sequence

from rlexp.base.private_apis import finish_like_the_interpreter

# The off-switch of every shortcut that only makes a start, a sweep or an exit shorter:
# RLEXP_FAST_START=0 (README.md, "Engine and speed").
FAST_START_ENV = "RLEXP_FAST_START"


def fast_start_enabled() -> bool:
    """False when RLEXP_FAST_START is 0 (or false/no/off): then no fork server, preload or
    early start of a sweep's workers (rlexp.launch.fast_start and the joblib launcher), no
    frozen heap or paused collector (here), no exit shortcut (exit_now), Tunix's __init__.py
    runs (rlexp.engine.tunix_patches), pre-flight composes every job in full and Hydra's
    basic sweeper composes each job again. Results are the same either way; read here only,
    each time it is asked (workers inherit the environment)."""
    return os.environ.get(FAST_START_ENV, "1").strip().lower() not in ("0", "false", "no", "off")

# Task-override sets of the jobs pre-flight composed and checked in this process (written by
# rlexp.launch.preflight, read by hydra_plugins/rlexp_presets/sweeper.py).
_checked_jobs: set[frozenset[str]] = set()


def task_overrides(job: Sequence[str]) -> frozenset[str]:
    """A job's overrides without hydra.* ones: what Hydra's sweeper batches hold."""
    return frozenset(o for o in job if not o.lstrip("+~").startswith("hydra"))


def note_checked_jobs(jobs: Iterable[Sequence[str]]) -> None:
    """Pre-flight composed and checked each of these jobs (their override lists) in full."""
    _checked_jobs.update(task_overrides(job) for job in jobs)


def all_checked(batch: Sequence[Sequence[str]]) -> bool:
    """Every job of a sweeper's batch was checked by pre-flight in this process, so Hydra's
    sweeper need not compose it again (False when the shortcuts are off)."""
    return (fast_start_enabled() and bool(batch)
            and all(task_overrides(job) in _checked_jobs for job in batch))

# Jobs this process has started (sweeps run several in one process), and whether one runs.
_jobs_in_process = 0
_in_job = False
# The frozen heap's size (objects) after this process's last full collection.
_frozen_after_full = 0


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep what exists before the job (imported modules, caches) out of the cyclic garbage
    collector while the job runs. Tunix 0.1.7 calls gc.collect() four times per job
    (tunix/rl/rl_cluster.py: RLCluster.__init__, _load_model for actor and reference;
    tunix/sft/utils.py show_hbm_usage) and once per log-prob pass when the actor is
    offloaded; each full collection walked every object JAX, Tunix and MLflow had loaded:
    0.44 s each, 14 of 64 s in an 8-job tiny sweep (cProfile). Frozen, a collection walks
    this job's objects only.

    The job's own garbage (its model, its buffers) is collected when it ends, still without
    walking the frozen heap. Only cycles through an object frozen before the job escape
    that; they are collected by a full pass at a later job's start once the frozen heap grew
    by a quarter since the last one, CPython's own rule for its oldest generation
    (Modules/gcmodule.c, long_lived_pending). A full pass walks every object: 0.4 s in one
    process after a tiny job, 1 s in a sweep worker forked from the fork server, where it
    also copies every page the worker shares with the server. The heap is left as found:
    unfrozen at the end unless it was frozen before the job (a sweep worker's preload)."""
    global _jobs_in_process, _in_job, _frozen_after_full

    if not fast_start_enabled():  # the collector as Python runs it
        yield
        return
    was_frozen = gc.get_freeze_count() > 0
    gc.freeze()
    if not _jobs_in_process:
        _frozen_after_full = gc.get_freeze_count()
    elif gc.get_freeze_count() > _frozen_after_full + _frozen_after_full // 4:
        gc.unfreeze()
        gc.collect()
        gc.freeze()
        _frozen_after_full = gc.get_freeze_count()
    _jobs_in_process += 1
    _in_job = True
    try:
        yield
    finally:
        _in_job = False
        gc.collect()
        if not was_frozen:
            gc.unfreeze()


@contextmanager
def loading(freeze: bool | None = None) -> Iterator[None]:
    """No cyclic collection while a large import runs (it leaves almost no cyclic garbage:
    under 1,000 objects per full pass in the run above), then freeze what it loaded so the
    job's collections (Tunix's four) skip it. Freezing is for a job (`frozen_heap` hands it
    back at the end) or a sweep worker warming up (freeze=True); elsewhere, a test or a
    bench building an engine by hand, the collector is only paused."""
    if not fast_start_enabled():
        yield
        return
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        if _in_job if freeze is None else freeze:
            gc.freeze()


def import_all(modules: Iterable[str]) -> None:
    """Import ahead of need (a sweep's fork server, its workers, its launching process); a
    module that fails is left for the code that needs it to report."""

    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:
            pass


def exit_now(code: int = 0) -> None:
    """Leave a finished command without the interpreter's teardown: wait for the threads
    that would be waited for (an async checkpoint, MLflow's logging queue), run every exit
    handler (MLflow's, loky's, logging's, JAX's, which also shuts jax.distributed down),
    flush, and os._exit. Only for a process that ran `python -m rlexp` to completion: the
    caller is the `__main__` guard, never a library call (pytest would exit with it).
    With the shortcuts off (fast_start_enabled) it is sys.exit(code)."""
    if not fast_start_enabled():
        raise SystemExit(code)

    finish_like_the_interpreter()  # Python's own first steps of its shutdown
    flush_std_streams()
    os._exit(code)


def flush_std_streams() -> None:
    """Flush stdout and stderr before an os._exit (which flushes nothing)."""

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or redirected stream: nothing left to save
            pass
