"""The process itself: the garbage collector (frozen_heap, loading), how a command leaves
(skip_teardown), which process of a multi-controller run this is, and `supervise`. On a 2-core
CPU, one tiny run (16.7 s): full collections took 2.2 s, 1.9 s of it during imports (~570k obj)."""

from __future__ import annotations

import atexit
import gc
import logging
import os
import re
import sys
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from typing import Iterator, Mapping, NoReturn, Sequence

# Jobs this process has started (sweeps run several in one process), and whether one runs.
_jobs_in_process = 0
_in_job = False
_frozen_after_full = 0  # the frozen heap's size (objects) after this process's last full collection


@contextmanager
def frozen_heap() -> Iterator[None]:
    """Keep what exists before the job out of the cyclic collector while it runs. Tunix 0.1.7 calls
    gc.collect() four times per job (tunix/rl/rl_cluster.py, tunix/sft/utils.py show_hbm_usage),
    each walking all JAX, Tunix and MLflow loaded: 0.44 s each, 14 of 64 s in an 8-job tiny sweep.
    Cycles through frozen objects wait for a full pass once the frozen heap grew by a quarter
    (Modules/gcmodule.c, long_lived_pending). The heap is left as found. With `loading`, 2-step
    run, warm cache, 2-core CPU, median of 3 paired: 13.3 s CPU instead of 15.1 s (wall 0.86x)."""
    global _jobs_in_process, _in_job, _frozen_after_full

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
def loading() -> Iterator[None]:
    """No cyclic collection during a large import (under 1,000 cyclic objects per full pass);
    inside a job, freeze what it loaded so its collections skip it; elsewhere only paused."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        if _in_job:
            gc.freeze()


_exit_status = 0  # what a command that skips the teardown exits with (exit_status)


def skip_teardown() -> None:
    """Leave with os._exit after the other exit handlers, skipping interpreter teardown (1-2 s
    after a tiny run). atexit runs last-registered first: call before MLflow, loky and JAX are
    imported, only in a command's own process (not pytest). Non-daemon threads are waited for.
    2-step default run, warm cache, 2-core CPU, median of 3 paired: 39.8 s wall instead of 44.0 s,
    13.8 s of CPU instead of 15.4 s."""
    atexit.register(_leave)


@contextmanager
def exit_status() -> Iterator[None]:
    """Exit status for skip_teardown: 0, SystemExit's code (1 for a message), 130 Ctrl-C, else 1."""
    global _exit_status
    try:
        yield
    except SystemExit as exc:
        _exit_status = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        raise
    except BaseException as exc:
        _exit_status = 130 if isinstance(exc, KeyboardInterrupt) else 1
        raise


def _leave() -> None:
    logging.shutdown()  # logging registers its handler when imported, before skip_teardown
    exit_at_once(_exit_status)


def exit_at_once(code: int) -> NoReturn:
    """Leave now, no exit handler: a lost peer would hang jax.distributed's shutdown barrier."""
    for stream in (sys.stdout, sys.stderr):  # os._exit flushes nothing
        with suppress(Exception):  # a closed or redirected stream: nothing left to save
            stream.flush()
    os._exit(code)


_process = (0, 1)  # (index, count) of this process (hardware.init_distributed sets it)

# The explicit route: JAX_COORDINATOR_ADDRESS is JAX's own; the count and id are rlexp's
# (jax.distributed.initialize takes them as arguments only).
COORDINATOR_ENV, COUNT_ENV, INDEX_ENV = ("JAX_COORDINATOR_ADDRESS", "JAX_NUM_PROCESSES",
                                         "JAX_PROCESS_ID")


@dataclass(frozen=True)
class Launch:
    """This process's launcher, index and count (None: unknown before jax.distributed asks)."""

    # "mpirun" | "srun" | "Cloud TPU" | "JAX_COORDINATOR_ADDRESS" | None (one plain process)
    launcher: str | None = None
    count: int | None = None
    index: int | None = None


def environment() -> dict[str, str]:
    """A copy of os.environ that another thread's unset cannot break: `dict(os.environ)` and
    `os.environ.items()` list the names, then read each, and raise KeyError for one unset in
    between. MLflow 3's telemetry thread unsets _MLFLOW_TELEMETRY_SESSION_ID when its config
    fetch fails (on any machine offline), at a moment of its own: it once cost a sweep its
    parent run (the secret scan of the environment raised)."""
    copy = {}
    for name in list(os.environ):
        value = os.environ.get(name)
        if value is not None:
            copy[name] = value
    return copy


def _int(environ: Mapping[str, str], name: str) -> int | None:
    with suppress(KeyError, ValueError):  # unset or empty: None
        return int(environ[name])
    return None


def detect_launch(environ: Mapping[str, str]) -> Launch:
    """This process's launcher from the variables it sets (pure): the clusters jax.distributed
    detects (jax/_src/clusters), and JAX_COORDINATOR_ADDRESS with rlexp's count and id."""
    if environ.get(COORDINATOR_ENV):
        return Launch(COORDINATOR_ENV, _int(environ, COUNT_ENV), _int(environ, INDEX_ENV))
    if "OMPI_COMM_WORLD_SIZE" in environ:  # Open MPI's mpirun
        return Launch("mpirun", _int(environ, "OMPI_COMM_WORLD_SIZE"),
                      _int(environ, "OMPI_COMM_WORLD_RANK"))
    if "SLURM_JOB_ID" in environ and "SLURM_STEP_NUM_TASKS" in environ:  # srun's job step
        return Launch("srun", _int(environ, "SLURM_STEP_NUM_TASKS"), _int(environ, "SLURM_PROCID"))
    if environ.get("TPU_WORKER_HOSTNAMES") and "TPU_WORKER_ID" in environ:  # GKE / TPU VM
        return Launch("Cloud TPU", len(environ["TPU_WORKER_HOSTNAMES"].split(",")),
                      _int(environ, "TPU_WORKER_ID"))
    return Launch()


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


# Set in the child of `supervise`, so that it trains instead of supervising again.
SUPERVISED_ENV = "RLEXP_SUPERVISED"
# C++ log lines (absl/glog: "E1124 11:16:34.253250   15169 file.cc:1549] ..."), their frames and
# gloo's lines: held back, shown only when they explain a failure that is not a lost peer.
_NATIVE_LINE = re.compile(rb"^([IWEF]\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ \S+:\d+\]|    @ |\*\*\* |"
                          rb"\[Gloo\] )")
# Lines of rlexp, Python and Hydra that end a run of held native lines.
_OWN_LINES = (b"rlexp", b"[20", b"Traceback", b"  File", b"Error executing job", b"Set the")
# What jax.distributed's coordination service says when a peer is gone (xla/tsl
# coordination_service.cc, coordination_service_agent.cc, as of jaxlib 0.10.2).
_UNHEALTHY = re.compile(rb"tasks are unhealthy \(stopped sending heartbeats\):\s*([\d,\s]+)")
_LEADER_GONE = re.compile(rb"leader task was preempted/died|Failed to send RPC to coordination")


def lost_processes(native: bytes) -> str | None:
    """The process jax.distributed's log lines report lost (pure): "1", "0" (coordinator), None."""
    found = _UNHEALTHY.search(native)
    if found:
        return b", ".join(re.findall(rb"\d+", found.group(1))).decode() or None
    return "0" if _LEADER_GONE.search(native) else None


def supervise(argv: Sequence[str], index: int | None, count: int | None) -> NoReturn:
    """Run this command again as a child and watch it (one process of a multi-controller run). A
    lost peer makes jax.distributed's coordination service abort the survivors with a page of
    native stack: the child's native stderr is held back and, when it dies that way, replaced by
    one line naming the lost process. The child dies with us, gets our signals, gives our status."""
    import signal
    import subprocess
    child = subprocess.Popen([sys.executable, "-m", "rlexp", *argv], stderr=subprocess.PIPE,
                             env={**environment(), SUPERVISED_ENV: "1"}, preexec_fn=_die_with_parent)
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
    with suppress(OSError):
        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
