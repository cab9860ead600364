"""What an rlexp process does with Python's own machinery: the cyclic garbage collector while
it imports and while a job runs, and how a finished command leaves; and the one switch for
every start-up shortcut (fast_start_enabled), with what pre-flight already checked; which
process of a multi-controller run this is (process_index, is_main_process) and the supervisor
that turns a lost peer's native abort into one line (supervise).

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
import re
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


def exit_at_once(code: int) -> "NoReturn":  # noqa: F821
    """Leave now, running no exit handler: a multi-controller process whose peer is lost
    (jax.distributed's shutdown barrier would wait for it, then abort)."""
    flush_std_streams()
    os._exit(code)


def flush_std_streams() -> None:
    """Flush stdout and stderr before an os._exit (which flushes nothing)."""

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except Exception:  # a closed or redirected stream: nothing left to save
            pass

# ------------------------------------------------------------------------------ processes

# This process's index and the process count (set by rlexp.planning.hardware.init_distributed
# when the job starts; 0 of 1 until then and for every one-process runtime).
_process = (0, 1)


def set_process(index: int, count: int) -> None:
    global _process
    _process = (int(index), int(count))


def process_index() -> int:
    """This process's index in a multi-controller run (0 otherwise)."""
    return _process[0]


def process_count() -> int:
    return _process[1]


def is_main_process() -> bool:
    """Process 0: the one that writes the run's files, logs to MLflow and prints."""
    return _process[0] == 0

# ----------------------------------------------------------------------------- supervising

# Set in the child of `supervise`, so that it trains instead of supervising again.
SUPERVISED_ENV = "RLEXP_SUPERVISED"
# C++ log lines (absl/glog: "E1124 11:16:34.253250   15169 file.cc:1549] ..."), their stack
# frames, and gloo's own lines: held back from the console, shown only when they explain a
# failure that is not a lost peer.
_NATIVE_LINE = re.compile(rb"^([IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]|    @ |\*\*\* |"
                          rb"\[Gloo\] )")
# What jax.distributed's coordination service says when a peer is gone (xla/tsl
# coordination_service.cc, coordination_service_agent.cc, as of jaxlib 0.10.2).
# Lines of rlexp, Python and Hydra that end a run of held native lines.
_OWN_LINES = (b"rlexp", b"[20", b"Traceback", b"  File", b"Error executing job", b"Set the")
_UNHEALTHY = re.compile(rb"tasks are unhealthy \(stopped sending heartbeats\):\s*([\d,\s]+)")
_LEADER_GONE = re.compile(rb"leader task was preempted/died|Failed to send RPC to coordination")


def lost_processes(native: bytes) -> str | None:
    """Which process jax.distributed reported lost, from its log lines (pure): "1", "0" when
    the coordinator (process 0) is gone, None when the lines say neither."""
    found = _UNHEALTHY.search(native)
    if found:
        ids = [i for i in re.split(rb"[,\s]+", found.group(1).strip()) if i]
        return ", ".join(i.decode() for i in ids) or None
    return "0" if _LEADER_GONE.search(native) else None


def supervise(argv: Sequence[str], index: int | None, count: int | None) -> "NoReturn":  # noqa: F821
    """Run this command again as a child and watch it: one process of a multi-controller run.

    When another process of the run dies, jax.distributed's coordination service ends the
    survivors (its heartbeat, hardware.heartbeat_timeout_s, or the coordinator's socket
    closing) with an abort in C++ and a page of native stack, which no Python handler sees.
    The child's stderr passes through here; native log lines are held back and, when the
    child dies that way, replaced by one line naming the lost process. The child dies with
    this process (PR_SET_PDEATHSIG) and gets the signals it receives (mpirun and SLURM send
    SIGTERM). The exit status is the child's (1 for a lost peer)."""
    import signal
    import subprocess

    env = {**os.environ, SUPERVISED_ENV: "1"}
    child = subprocess.Popen([sys.executable, "-m", "rlexp", *argv], env=env,
                             stderr=subprocess.PIPE, preexec_fn=_die_with_parent)
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGUSR1):
        signal.signal(sig, lambda s, _f: child.send_signal(s))
    held: list[bytes] = []
    err = sys.stderr.buffer
    said = False  # the child said why it ended itself (rlexp: error: ...)
    native = False  # the previous line was held: an unprefixed line continues it
    assert child.stderr is not None
    for line in iter(child.stderr.readline, b""):
        if _NATIVE_LINE.match(line) or (native and not line.startswith(_OWN_LINES)):
            held.append(line)
            native = True
            continue
        native = False
        said = said or line.startswith(b"rlexp: error:")
        err.write(line)
        err.flush()
    code = child.wait()
    text = b"".join(held)
    lost = lost_processes(text) if code != 0 and not said else None
    if lost is not None:
        me = f"process {index}" if index is not None else "this process"
        of = f" of {count}" if count else ""
        print(f"rlexp: error: process {lost}{of} was lost (jax.distributed: no heartbeat, or "
              f"its coordinator is gone); {me} stopped too: rerun the same command to resume "
              "from the last checkpoint", file=sys.stderr, flush=True)
        os._exit(1)
    if code != 0 and not said and b"RegisterTask" in text:  # jaxlib gave up joining
        print("rlexp: error: this process could not join the coordinator of its "
              "multi-controller run within hardware.join_timeout_s: check that process 0 "
              "runs and that its address and port are reachable", file=sys.stderr, flush=True)
        os._exit(2)
    if code not in (0, 2) and not said and text:
        err.write(text)  # a native failure of this process: its own explanation
        err.flush()
    os._exit(code if code >= 0 else 128 - code)


def _die_with_parent() -> None:
    """In the child, before exec: get SIGKILL when the supervising parent dies (Linux)."""
    import ctypes
    import signal

    try:
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    except OSError:
        pass
