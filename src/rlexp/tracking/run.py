"""One run dir's MLflow run: send spooled records to the store, for the live listener (each flush)
and `python -m rlexp.sync` (replay after an outage or crash). Sending is idempotent, so a flush
that failed half-way is sent again: params and tags re-set to the same values, metrics keep their
wall time and MLflow drops a (key, step, time, value) row it has, artifacts overwrite."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

from rlexp.tracking import store
from rlexp.tracking.plots import plot_run
from rlexp.tracking.spool import SPOOL_FILE, Link, Spool

if TYPE_CHECKING:
    from mlflow import MlflowClient

CURVES_FILE = "curves.png"
# What curves.png plots (whichever the run has): panel title -> metric names.
CURVE_PANELS = {"reward": ("train/reward_mean", "eval/mean_reward"),
                "accuracy": ("eval/accuracy", "eval/format_accuracy", "eval/pass_at_k")}
NEVER = float("-inf")
ALWAYS = float("inf")
# Records that become files or dataset inputs of the run (sent one by one, in order).
FILE_KINDS = frozenset({"artifact", "json", "text", "inputs", "model"})


def is_ready(record: dict, gate: float) -> bool:
    """Metrics wait for a checkpoint at or after their step; everything else goes at once."""
    return record["kind"] != "metrics" or record["step"] <= gate


class TrackedRun:
    """Thread-safe for one writer (flush) and producers (add): the store is written off the lock."""

    def __init__(self, run_dir: Path, link: Link):
        self.run_dir = Path(run_dir)
        self.link = link
        self.spool = Spool(self.run_dir / SPOOL_FILE)
        self.records: list[dict] = self.spool.read()  # not yet in the store (as spooled)
        self.skipped = self.spool.skipped  # damaged spool lines, said once here
        if self.skipped:
            print(f"rlexp: warning: {self.spool.path}: skipped {self.skipped} damaged record(s) "
                  "(torn or unreadable lines); the others are sent", file=sys.stderr, flush=True)
        self._lock = threading.RLock()  # re-entrant: a signal's on_run_end may interrupt an add
        # The thread inside add(), if any (the lock admits one): see `adding`.
        self._adder: int | None = None
        self._client: MlflowClient | None = None
        # Records the store failed for good (not an outage), as "what: why"; never retried.
        self.dropped: list[str] = []

    @property
    def client(self) -> "MlflowClient":
        store.ensure_store(self.link.uri)  # memoized; a store that was down is made now
        if self._client is None:
            self._client = store.client(self.link.uri)
        return self._client

    @property
    def adding(self) -> bool:
        """Whether the calling thread is inside add(): a signal handler that lands there must not
        wait for the writer, which needs the lock this thread holds. Another thread's add (the
        environment's, at a short run's end) releases it: waiting is safe then."""
        return self._adder == threading.get_ident()

    def add(self, record: dict) -> None:
        with self._lock:
            outer, self._adder = self._adder, threading.get_ident()
            try:
                self.records.append(record)
                self.spool.append(record)
            finally:
                self._adder = outer

    def drop_metrics_after(self, step: int) -> None:
        """Resume from a checkpoint at `step`: later metrics will be produced again."""
        with self._lock:
            kept = [r for r in self.records if not (r["kind"] == "metrics" and r["step"] > step)]
            if len(kept) < len(self.records):
                self.records = kept
                self.spool.rewrite(kept)

    def waiting(self, kind: str) -> int:
        with self._lock:
            return sum(r["kind"] == kind for r in self.records)

    def flush(self, gate: float) -> int:
        """Send records ready under `gate`; returns how many. Store errors raise (records stay)."""
        with self._lock:
            count = len(self.records)
            ready = [r for r in self.records[:count] if is_ready(r, gate)]
        if not ready:
            return 0
        self._send(ready)
        sent_step = max((r["step"] for r in ready if r["kind"] == "metrics"), default=-1)
        if sent_step > self.link.logged_step:  # before the spool forgets them (crash-safe)
            self.link.logged_step = sent_step
            self.link.save(self.run_dir)
        with self._lock:
            self.records = [r for r in self.records[:count] if not is_ready(r, gate)] \
                + self.records[count:]
            self.spool.rewrite(self.records)
        return len(ready)

    def close(self) -> None:
        self.spool.close()

    def _send(self, ready: list[dict]) -> None:
        if self.link.run_id is None:
            starts = [r for r in ready if r["kind"] == "start"]
            if not starts:
                raise RuntimeError(f"{self.run_dir}: no MLflow run id and no start record")
            self._create(starts[-1])
        run_id = self.link.run_id
        params = {k: v for r in ready if r["kind"] == "params" for k, v in r["params"].items()}
        tags = {k: v for r in ready if r["kind"] == "tags" for k, v in r["tags"].items()}
        self._log_params_tags(run_id, params, tags)
        for r in ready:
            if r["kind"] in FILE_KINDS:
                self._send_file(run_id, r)
        self._log_metrics(run_id, [r for r in ready if r["kind"] == "metrics"])
        if any(r["kind"] == "curves" for r in ready):  # after the metrics they plot
            self._send_file(run_id, {"kind": "curves"})
        last = next((r for r in reversed(ready) if r["kind"] == "status"), None)
        if last is not None and last["status"] == "RUNNING":
            self.client.update_run(run_id, status="RUNNING")
        elif last is not None:
            self.client.set_terminated(run_id, last["status"], end_time=last.get("t"))

    def _send_file(self, run_id: str, r: dict) -> None:
        """One file-like record; a lasting failure drops it (self.dropped), an outage raises."""
        try:
            self._send_one(run_id, r)
        except Exception as exc:
            if store.is_outage(exc):
                raise  # the store may come back: everything stays spooled
            # The same failure every time (a path the store's filesystem cannot take): retrying
            # would hold back the records behind it and leave the run RUNNING. Dropped, said once.
            self.dropped.append(f"{_what(r)}: {store.first_line(exc)}")

    def _send_one(self, run_id: str, r: dict) -> None:
        if r["kind"] == "curves":
            self._log_curves(run_id)
        elif r["kind"] == "artifact":
            self._log_artifact(run_id, Path(r["path"]), r.get("artifact_path"))
        elif r["kind"] == "json":
            self.client.log_dict(run_id, r["data"], r["artifact_file"])
        elif r["kind"] == "text":
            self.client.log_text(run_id, r["text"], r["artifact_file"])
        elif r["kind"] == "inputs":
            self._log_inputs(run_id, r["datasets"])
        elif r["kind"] == "model":
            self._log_model_output(run_id, r["artifact_path"], int(r.get("step", 0)))

    def _create(self, start: dict) -> None:
        exp_id = store.experiment_id(self.client, self.link.experiment, self.link.uri)
        tags = {store.sanitize_key(k): store.truncate(v, store.MAX_TAG_VAL_LEN)
                for k, v in start.get("tags", {}).items()}
        if start.get("parent_run_id"):
            tags["mlflow.parentRunId"] = start["parent_run_id"]
            tags["parent_run_id"] = start["parent_run_id"]
        run = self.client.create_run(exp_id, start_time=start.get("t"), tags=tags,
                                     run_name=start["name"])
        self.link.run_id, self.link.experiment_id = run.info.run_id, exp_id
        self.link.save(self.run_dir)

    def _log_params_tags(self, run_id: str, params: dict[str, str], tags: dict[str, str]) -> None:
        from mlflow.entities import Param, RunTag
        from mlflow.exceptions import MlflowException
        items = [Param(k, v) for k, v in params.items()] + [RunTag(k, v) for k, v in tags.items()]
        n = store.MAX_PARAMS_TAGS_PER_BATCH
        for i in range(0, len(items), n):
            chunk = items[i:i + n]
            params = [p for p in chunk if isinstance(p, Param)]
            try:
                self.client.log_batch(run_id, params=params,
                                      tags=[t for t in chunk if isinstance(t, RunTag)])
            except MlflowException as exc:
                if exc.error_code != "INVALID_PARAMETER_VALUE":
                    raise
                # A param logged before with another value (MLflow params are write-once) can
                # never be sent; the batch was refused whole: its tags and the other params
                # go again, one param at a time, and only the refused ones are dropped.
                chunk_tags = [t for t in chunk if isinstance(t, RunTag)]
                if chunk_tags:
                    self._log_or_drop(run_id, "tags", tags=chunk_tags)
                for p in params:
                    self._log_or_drop(run_id, f"param {p.key}={p.value!r}", params=[p])

    def _log_or_drop(self, run_id: str, what: str, **batch: Any) -> None:
        """One log_batch; a refusal for good drops it (self.dropped, once however often a
        resend meets it), anything else raises."""
        from mlflow.exceptions import MlflowException
        try:
            self.client.log_batch(run_id, **batch)
        except MlflowException as exc:
            if exc.error_code != "INVALID_PARAMETER_VALUE":
                raise
            dropped = f"{what}: {store.first_line(exc)}"
            if dropped not in self.dropped:
                self.dropped.append(dropped)

    def _log_metrics(self, run_id: str, records: list[dict]) -> None:
        from mlflow.entities import Metric
        metrics = [Metric(key, value, r["t"], r["step"])
                   for r in records for key, value in r["values"].items()]
        n = store.MAX_METRICS_PER_BATCH
        for i in range(0, len(metrics), n):
            self.client.log_batch(run_id, metrics=metrics[i:i + n])

    def _log_inputs(self, run_id: str, datasets: list[dict]) -> None:
        """Run inputs (Datasets column, Inputs), less those the run has (a resend adds nothing)."""
        from mlflow.entities import Dataset, DatasetInput, InputTag
        run = self.client.get_run(run_id)
        have = {(i.dataset.name, i.dataset.digest)
                for i in (run.inputs.dataset_inputs if run.inputs else [])}
        new = [d for d in datasets if (d["name"], d["digest"]) not in have]
        if new:
            self.client.log_inputs(run_id, datasets=[
                DatasetInput(Dataset(d["name"], d["digest"], d["source_type"], d["source"],
                                     d.get("schema"), d.get("profile")),
                             tags=[InputTag("mlflow.data.context", d["context"])])
                for d in new])

    def _log_model_output(self, run_id: str, artifact_path: str, step: int) -> None:
        """A READY LoggedModel at `artifact_path` (no second copy) as the run's output, once."""
        from mlflow.entities import LoggedModelOutput
        exp_id = self.link.experiment_id or self.client.get_run(run_id).info.experiment_id
        found = self.client.search_logged_models(
            experiment_ids=[exp_id], filter_string=f"source_run_id = '{run_id}'")
        if found:
            model_id = found[0].model_id
        else:
            model_id = self.client.create_logged_model(
                exp_id, name="policy", source_run_id=run_id, model_type="hf-safetensors",
                tags={"rlexp.weights": f"runs:/{run_id}/{artifact_path}"}).model_id
            self.client.finalize_logged_model(model_id, "READY")
        # The store keeps one output row per (run, model) and refuses a second one (a rerun
        # that exports again, a resend): log it only when the run does not have it yet.
        run = self.client.get_run(run_id)
        if all(o.model_id != model_id for o in (run.outputs.model_outputs if run.outputs else [])):
            self.client.log_outputs(run_id, [LoggedModelOutput(model_id, step)])

    def _log_artifact(self, run_id: str, path: Path, artifact_path: str | None) -> None:
        if path.is_dir():
            self.client.log_artifacts(run_id, str(path), artifact_path)
        elif path.is_file():
            self.client.log_artifact(run_id, str(path), artifact_path)
        else:
            print(f"rlexp: warning: artifact {path} is gone; not logged", flush=True)

    def _log_curves(self, run_id: str) -> None:
        history = fetch_history(self.client, run_id,
                                [m for names in CURVE_PANELS.values() for m in names])
        path = self.run_dir / CURVES_FILE
        if plot_run(history, CURVE_PANELS, path, title=self.run_dir.name):
            self.client.log_artifact(run_id, str(path))


def fetch_history(client: "MlflowClient", run_id: str,
                  names: list[str]) -> dict[str, list[tuple[int, float]]]:
    """{metric: [(step, value)] sorted by step} for the names the run has."""
    out: dict[str, list[tuple[int, float]]] = {}
    for name in names:
        points = client.get_metric_history(run_id, name)
        if points:
            out[name] = sorted((m.step, m.value) for m in points)
    return out


def _what(r: dict) -> str:
    """One record in words: 'artifact summary.json', 'inputs'."""
    name = r.get("artifact_file") or r.get("artifact_path") or \
        (Path(r["path"]).name if r.get("path") else None)
    return f"{r['kind']} {name}" if name else r["kind"]


def record(kind: str, **fields: Any) -> dict:
    return {"kind": kind, **fields}
