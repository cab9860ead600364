"""What MLflow's UI and its users expect of a run: standard tags, a short name, dataset inputs,
system metrics, and no series that cannot vary. Pure functions, except the monitor."""

from __future__ import annotations

import getpass
import itertools
import logging
import os
import sys
import threading
import time
import warnings
from typing import Any, Callable, Iterable, Mapping

from hydra.core.override_parser.overrides_parser import OverridesParser

from rlexp.base.redact import is_secret_key
from rlexp.config import naming

# Imported inside functions, on purpose: mlflow (2.3 s) and pandas, where a dataset input or the
# system-metrics monitor is made (tracking.warm_up loads MLflow on a thread as the engine builds).

log = logging.getLogger("rlexp")

MAX_RUN_NAME = 48  # MLflow's run-name column and chart legends show ~20-30 characters
# Group choices that make up the default name of a run that is not part of a sweep.
NAME_GROUPS = ("algo", "model", "dataset", "hardware")


def swept_tags(overrides: Iterable[str], swept: Iterable[str] | None) -> dict[str, str]:
    """{'sweep.algo.beta': '0.04'}: a sweep job's swept values in full (unabbreviated)."""
    keys = set(swept or ())
    return {f"sweep.{k}": v for k, v in naming.override_values(overrides).items()
            if k in keys and not is_secret_key(k)}


def display_name(run_name: str | None, choices: Mapping[str, str], overrides: Iterable[str],
                 swept: Iterable[str] | None) -> str:
    """The MLflow run name: tracker.run_name; a sweep job's swept values abbreviated ('β=0.04 G=4');
    else group choices plus the command's overrides. Run dirs keep their long unique names."""
    if run_name:
        return run_name
    pairs = [o.lstrip("+~").split("=", 1) for o in naming.identity_overrides(overrides) if "=" in o]
    pairs = [(k, v) for k, v in pairs if not is_secret_key(k)]
    if swept is not None and (picked := naming.label(dict(pairs), list(swept), MAX_RUN_NAME)):
        return picked
    base = "-".join(str(choices[g]) for g in NAME_GROUPS if choices.get(g))
    # What the command changed leads (a group choice by its value, a key by its short name);
    # whole tokens only: past the room, '+N' says how many were left out.
    items = [naming.label_item(k, v) for k, v in pairs if k not in NAME_GROUPS]
    room = MAX_RUN_NAME - len(base) - 3 if base else MAX_RUN_NAME
    extra = naming.fit(items, max(room, 1), sep=",")
    return (f"{extra} ({base})" if extra and base else extra or base) or "rlexp"


def sweep_display_name(overrides: Iterable[str], swept: Iterable[str] | None, fallback: str) -> str:
    """The sweep's parent run name: 'sweep optuna: beta,epsilon' (sweep files, swept leaves)."""
    files = [o.split("=", 1)[1] for o in overrides if o.lstrip("+").startswith("sweep=")]
    keys = [k.lstrip("+~").rsplit(".", 1)[-1] for k in swept or []]
    if not files and not keys:
        return fallback[:MAX_RUN_NAME]
    head = " ".join(["sweep", *files])
    return (f"{head}: {','.join(keys)}" if keys else head)[:MAX_RUN_NAME]


def swept_keys(overrides: Iterable[str], sweeper_params: Mapping[str, Any] | None) -> list[str]:
    """Keys a multirun varies: sweep overrides on the command line (a=1,2 / range / choice /
    interval) and the sweeper's params (sweeps/*.yaml) whose value is not a single fixed one."""
    parser = OverridesParser.create()
    keys = [o.get_key_element().lstrip("+~")
            for o in parser.parse_overrides([str(o) for o in overrides]) if o.is_sweep_override()]
    for key, spec in (sweeper_params or {}).items():
        try:
            one = parser.parse_overrides([f"{key}={spec}"])[0]
        except Exception:
            continue
        if one.is_sweep_override() and key not in keys:
            keys.append(str(key))
    return keys


def standard_tags(tags: Mapping[str, str], extra: Mapping[str, Any]) -> dict[str, str]:
    """MLflow's reserved tags (mlflow.utils.mlflow_tags) the UI shows as Source, Created by,
    git commit and description, from rlexp's own tags and the user's tracker.tags."""
    out = {"mlflow.source.name": "python -m rlexp", "mlflow.source.type": "LOCAL",
           "mlflow.project.entryPoint": "rlexp", "mlflow.user": _user()}
    commit = tags.get("git.commit")
    if commit and commit != "unknown":
        out["mlflow.source.git.commit"] = commit
    if command := tags.get("command"):
        dirty = " (uncommitted changes)" if tags.get("git.dirty") == "true" else ""
        out["mlflow.note.content"] = (f"`{command}`\n\nrun dir: {extra.get('run_dir', '')}"
                                      f"\n\ngit: {commit or 'unknown'}{dirty}")
    out.update({str(k): str(v) for k, v in (extra.get("user_tags") or {}).items()})
    return out


def _user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # no passwd entry in some containers
        return os.environ.get("USER", "unknown")


# The loss's ratio statistics (algo/losses.py): not train/clipped_ratio, the share of
# completions cut at the length limit, which varies in every run.
RATIO_PREFIXES = ("train/ratio_", "train/clip_fraction", "train/clip_ratio/")


def constant_metrics(num_iterations: int, batch_size: int, mini_batch_size: int | None,
                     off_policy_steps: int = 0) -> tuple[set[str], tuple[str, ...]]:
    """(names, prefixes) of series constant in this run: on-policy (one update per batch, one
    mini-batch, sampled with the weights being updated) the importance ratio is 1, so ratio
    stats and clip fractions; eval/k too. Sampled ahead (rollout.off_policy_steps), the ratio
    is taken against the behaviour log-probs: it varies, and shows the staleness."""
    off_policy = (num_iterations > 1 or (mini_batch_size or batch_size) < batch_size
                  or off_policy_steps > 0)
    return {"eval/k"}, (() if off_policy else RATIO_PREFIXES)


def dataset_input(name: str, source: str, context: str, rows: list[dict]) -> dict:
    """A run input as MLflow's dataset entity (mlflow.data.pandas_dataset), JSON for the spool."""
    import mlflow.data
    import pandas as pd
    with warnings.catch_warnings():  # "source can be interpreted in multiple ways": a name
        warnings.simplefilter("ignore")
        ds = mlflow.data.from_pandas(pd.DataFrame(rows), source=source, name=name)
    entity = ds.to_dict()  # name, digest, source, source_type, schema, profile (all str)
    keys = ("name", "digest", "source_type", "source", "schema", "profile")
    return {**{k: entity.get(k) for k in keys}, "context": context}


def rows_of(examples: Iterable[Any]) -> list[dict]:
    return [{"question": getattr(e, "question", ""), "answer": getattr(e, "answer", ""),
             "prompt": getattr(e, "prompt", "")} for e in examples]


# System metrics: the interval starts at MIN_SYSTEM_INTERVAL_S and grows with the run's age so
# any run gets about SYSTEM_POINTS samples (a 60 s run at a fixed 10 s had 2-4 points).
MIN_SYSTEM_INTERVAL_S = 1.0
SYSTEM_POINTS = 60


def sampling_interval(elapsed_s: float, cap_s: float) -> float:
    """Seconds until the next system sample of a run `elapsed_s` old (pure)."""
    return min(max(elapsed_s / SYSTEM_POINTS, MIN_SYSTEM_INTERVAL_S), cap_s)


class SystemMetrics:
    """System metrics as system/*, sampled on one thread of rlexp's: MLflow's monitors (CPU, RAM,
    disk, network, NVIDIA GPUs, as its SystemMetricsMonitor builds them) and rlexp's RSS and JAX
    memory, at sampling_interval(run age, every_s) unless MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL
    is set, written every FLUSH_EVERY_S and at stop, one step per sample.

    MLflow's monitor is built for its monitors but not started: its thread reads the run from the
    store at every sample (MlflowClient.get_run, 20-22 ms of CPU on the default run's sqlite
    store) and writes each sample: 3.4% of a core beside the training at the 1 s interval of a
    run's first minute (MLflow 3.17, the tiny default run, 2-core CPU)."""

    # Seconds between two writes: one write per early 1 s sample would contend with the run's
    # own writes to a sqlite store.
    FLUSH_EVERY_S = 10.0

    def __init__(self, uri: str, run_id: str, every_s: float, resume: bool):
        from mlflow import MlflowClient
        from mlflow.system_metrics.system_metrics_monitor import SystemMetricsMonitor

        # It logs "Skip logging GPU metrics" at INFO on every CPU run.
        logging.getLogger("mlflow.system_metrics").setLevel(logging.WARNING)
        fixed = os.environ.get("MLFLOW_SYSTEM_METRICS_SAMPLING_INTERVAL")  # the user's wins
        self.monitor = SystemMetricsMonitor(run_id, sampling_interval=every_s,
                                            tracking_uri=uri)
        self.client, self.run_id = MlflowClient(uri), run_id
        self.fixed_s = float(self.monitor.sampling_interval) if fixed else None
        self.every_s = every_s
        # MLflow's keys: system/, and the node id when one is set.
        self.prefix = "system/" + (f"{self.monitor.node_id}/" if self.monitor.node_id else "")
        mlflow_readings = mlflow_monitors(self.monitor.monitors,
                                          self.monitor.samples_before_logging)
        self.readers = [r for r in (mlflow_readings, process_memory, jax_memory_reader())
                        if r is not None]
        self.step = 0
        if resume:  # one past the last logged sample
            history = self.client.get_metric_history(self.run_id,
                                                     f"{self.prefix}process_rss_megabytes")
            self.step = max((m.step for m in history), default=-1) + 1
        self.pending: list[Any] = []
        self.flushed = self.started = time.monotonic()
        self.stopping = threading.Event()
        self.warned = False
        self.thread = threading.Thread(target=self.sample_until_stopped, daemon=True,
                                       name="rlexp-system-metrics")
        self.thread.start()

    def sample(self) -> None:
        from mlflow.entities import Metric
        now = int(time.time() * 1000)
        for reader in self.readers:
            for key, value in reader().items():
                self.pending.append(Metric(f"{self.prefix}{key}", round(value, 1), now, self.step))
        self.step += 1

    def flush(self) -> None:
        pending, self.pending = self.pending, []
        for i in range(0, len(pending), 1000):  # log_batch takes 1000 metrics at most
            self.client.log_batch(self.run_id, metrics=pending[i:i + 1000], synchronous=True)
        self.flushed = time.monotonic()

    def sample_until_stopped(self) -> None:
        while True:
            try:
                self.sample()
                if time.monotonic() - self.flushed >= self.FLUSH_EVERY_S:
                    self.flush()
            except Exception as exc:  # diagnostics only: never stop the run
                if not self.warned:
                    log.warning("system metrics: %s", exc)
                    self.warned = True
            interval = self.fixed_s or sampling_interval(time.monotonic() - self.started,
                                                         self.every_s)
            if self.stopping.wait(interval):
                return

    def stop(self) -> None:
        """Stop sampling, then a last sample, so a run shorter than one interval has two."""
        self.stopping.set()
        self.thread.join()
        try:
            self.sample()
            self.flush()
        except Exception as exc:  # diagnostics only
            log.warning("system metrics: %s", exc)


def mlflow_monitors(monitors: list[Any], samples: int = 1) -> Callable[[], dict[str, float]]:
    """MLflow's system-metrics monitors (mlflow.system_metrics.metrics) read as its monitor loop
    reads them: each call collects; every `samples`-th (MLFLOW_SYSTEM_METRICS_SAMPLES_BEFORE_
    LOGGING) gives the mean of the samples since the last, the other calls nothing."""
    calls = itertools.count(1)

    def read() -> dict[str, float]:
        for m in monitors:
            m.collect_metrics()
        if next(calls) % max(int(samples), 1):
            return {}
        out: dict[str, float] = {}
        for m in monitors:
            out.update(m.aggregate_metrics())
            m.clear_metrics()
        return out

    return read


def process_memory() -> dict[str, float]:
    """This process's resident memory, MiB (psutil, which MLflow's monitor needs anyway)."""
    import psutil
    return {"process_rss_megabytes": psutil.Process().memory_info().rss / 2**20}


def jax_memory_reader() -> Callable[[], dict[str, float]] | None:
    """JAX's memory in MiB, or None without jax: per device <platform>_<id>_memory_{usage,peak,
    limit}_megabytes, else (CPU) live arrays' bytes as jax_live_arrays_megabytes."""
    jax = sys.modules.get("jax")  # the run imported it; never import JAX for this
    if jax is None:
        return None
    try:
        devices = [d for d in jax.local_devices() if d.platform != "cpu"]
    except Exception:
        return None

    def read() -> dict[str, float]:
        if not devices:
            return {"jax_live_arrays_megabytes": sum(a.nbytes for a in jax.live_arrays()) / 2**20}
        out = {}
        for d in devices:
            stats = d.memory_stats() or {}
            for key, name in (("bytes_in_use", "memory_usage_megabytes"),
                              ("peak_bytes_in_use", "memory_peak_megabytes"),
                              ("bytes_limit", "memory_limit_megabytes")):
                if key in stats:
                    out[f"{d.platform}_{d.id}_{name}"] = stats[key] / 2**20
        return out

    return read
