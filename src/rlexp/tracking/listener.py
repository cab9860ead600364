"""The MLflow listener: loop events -> spooled records -> batched writes by a writer thread. The
loop only appends to the spool (~0.02 ms a step); the writer uses log_batch (MLflow's sqlite store:
~0.15 ms per metric point, ~3 ms a step at 20 metrics; JAX releases the GIL while computing, so it
writes in those gaps). MLflow's async logging cost a 30 ms step more (bench/tracking_step.py,
medians of 3, loaded 2-core CPU: +4.8 and +6.5 ms against +3.0 and +1.7 ms), sends only metrics,
params and tags, never retries a failed batch, and a dead logging thread leaves RunOperations.wait()
waiting for ever.

Exactly once across crashes and resumes: with checkpointing, metrics of step s are written once a
checkpoint at step >= s exists (the gate); a run resumed at step S reopens its MLflow run, writes
spooled metrics of steps <= S and drops later ones (the loop produces them again). Without
checkpointing, writes happen every tracker.flush_every_s and at the end. Never fatal: an unreachable
store leaves records in the spool, retried or replayed by `python -m rlexp.sync`."""

from __future__ import annotations

import contextlib
import json
import logging
import os
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import IO, Any

import yaml

from rlexp.base.events import Listener, RunInfo
from rlexp.base.lock import try_flock
from rlexp.base.redact import redact_obj, redact_params, redact_text, redact_uri, redact_value
from rlexp.base.summary import read_summary
from rlexp.tracking import store
from rlexp.tracking.conventions import SystemMetrics, dataset_input, rows_of, standard_tags
from rlexp.tracking.environment import environment, git_diff, requirements
from rlexp.tracking.run import ALWAYS, NEVER, TrackedRun, record
from rlexp.tracking.spool import LOCK_FILE, SPOOL_FILE, Link, Spool

SAMPLES_DIR = "eval_samples"
# Training rollouts (on_rollouts), one table per logged step, as TRL's log_completions.
ROLLOUTS_DIR = "rollouts"
# The artifact folders listed in mlflow.loggedArtifacts (the UI's table view of each).
TABLE_DIRS = (SAMPLES_DIR, ROLLOUTS_DIR)
ENVIRONMENT_WAIT_S = 10.0  # on_run_end's wait for environment.json, diff.patch
# The exported Hugging Face dir's artifact path (rlexp.export), also logged as a LoggedModel
# output: MLflow 3's UI lists runs without one as "Evaluation runs" in its GenAI view.
MODEL_ARTIFACT = "model"
TERMINAL = ("FINISHED", "FAILED", "KILLED")
START_WAIT_S = 30.0  # how long on_run_start waits for the run id (tracking.json)
# How long on_run_end may take in all (SIGTERM leaves a grace period of ~30 s); what is not
# written by then stays in the spool for `rlexp.sync`.
END_BUDGET_S = 20.0
MIN_PERIOD_S = 0.05  # shortest pause of the writer's timer (flush_every_s=0 would spin)
FINAL_RETRY_S = (0.5, 1.5)  # between final attempts (a sqlite store locked by other jobs)
# mlflow.loggedArtifacts lists tables for the UI's evaluation view; the tag holds 8000 chars.
MAX_LISTED_TABLES = 100


def now_ms() -> int:
    return int(time.time() * 1000)


def end_ms(summary: dict[str, Any]) -> int:
    """The job's end per summary.json (started + wall_s): the run lasts its wall time; else now."""
    started, wall = summary.get("started"), summary.get("wall_s")
    if isinstance(started, (int, float)) and isinstance(wall, (int, float)):
        return int((started + wall) * 1000)
    return now_ms()


def warn(message: str) -> None:
    """One `rlexp: warning:` line; masked (a URI's credentials, exception text, known secrets)."""
    print(f"rlexp: warning: {redact_text(message)}", file=sys.stderr, flush=True)


def clean_params(flat: dict[str, Any]) -> dict[str, str]:
    return {store.sanitize_key(k): store.truncate(v, store.MAX_PARAM_VAL_LEN)
            for k, v in redact_params(flat).items()}


def same_store(saved: str, uri: str) -> bool:
    """tracking.json's URI (credentials masked) names the same store as `uri`."""
    return saved == uri or saved == redact_uri(uri)


def clean_tags(tags: dict[str, Any]) -> dict[str, str]:
    """Masked as params are: by a secret name (tracker.tags.api_key) and by value."""
    return {store.sanitize_key(k): store.truncate(redact_value(str(k), str(v)),
                                                  store.MAX_TAG_VAL_LEN)
            for k, v in tags.items()}


class MlflowListener(Listener):
    def __init__(self, uri: str, experiment: str, run_dir: Path, gated: bool,
                 flush_every_s: float,
                 constant: tuple[set[str], tuple[str, ...]] = (set(), ()),
                 system_metrics_every_s: float = 0.0):
        self.uri = uri
        self.experiment = experiment
        self.run_dir = Path(run_dir)
        self.gated = gated
        self.flush_every_s = flush_every_s
        self.run: TrackedRun | None = None
        self._gate = NEVER if gated else ALWAYS  # write metrics up to this step (gated: checkpoint)
        self._skip_upto = NEVER  # on resume: steps <= this are logged or spooled
        self._ended = False
        self._names: dict[str, str] = {}
        self._lock: IO[str] | None = None
        # Writer thread: flush requests are numbered; `_done` is the last one served.
        self._cv = threading.Condition()
        self._requested = self._done = 0
        self._stopping = False
        self._writer: threading.Thread | None = None
        # Series left out because they cannot vary in this run (names, prefixes).
        self._constant_names, self._constant_prefixes = constant
        self._system_every_s = system_metrics_every_s
        self._system: Any = None
        self._last_step = 0
        self._environment: threading.Thread | None = None
        self._failure: BaseException | None = None  # last write's failure (None after a good one)
        self._dropped_said = False

    def on_run_start(self, info: RunInfo) -> None:
        store.wait_prepared(self.uri)  # tracking.warm_up's thread, if the job started one
        self.run_dir.mkdir(parents=True, exist_ok=True)
        # Held while the run is live, so `rlexp.sync` does not replay the spool at once.
        self._lock = try_flock(self.run_dir / LOCK_FILE)
        if self._lock is None:
            warn(f"another process is tracking {self.run_dir} (tracking.lock is held)")
        link = Link.load(self.run_dir)
        if link is None and Link.damaged(self.run_dir):
            link = self._recover_link()
        if link is not None and same_store(link.uri, self.uri):
            link.uri = self.uri  # tracking.json keeps the URI with its credentials masked
        # One MLflow run per run dir: a rerun reopens it, also from step 0 (no checkpoint yet);
        # a run never created, if its start record is spooled.
        if link is not None and link.uri == self.uri and (link.run_id is not None or any(
                r["kind"] == "start" for r in Spool(self.run_dir / SPOOL_FILE).read())):
            # restarted: no checkpoint was restored (the loop starts over from step 0)
            self._reopen(link, info.start_step,
                         restarted=info.start_step == 0 and not info.extra.get("resumed"))
        else:
            if link is not None:
                self._close_previous(link)
            self._start(info)
        self._writer = threading.Thread(target=self._write_loop, name="rlexp-mlflow", daemon=True)
        self._writer.start()
        self.flush(timeout=START_WAIT_S)  # the run exists (tracking.json) before step 1
        # environment.json, requirements.txt, diff.patch: ~0.1-0.4 s, off the loop's thread
        self._environment = threading.Thread(
            target=self._keep_environment, args=(info.tags.get("git.dirty") == "true",),
            name="rlexp-environment", daemon=True)
        self._environment.start()
        # Off, or the store is unreachable now (the monitor writes directly): no monitor.
        if self._system_every_s > 0 and self.run.link.run_id is not None:
            log_file_only(SYSTEM_METRICS_LOGGER)
            try:  # resume: continue after the system/* steps the run has (a reopened run)
                self._system = SystemMetrics(self.uri, self.run.link.run_id,
                                             self._system_every_s, resume=True)
            except Exception as exc:
                warn(f"no system metrics: {store.first_line(exc)}")

    def on_metrics(self, step: int, metrics: dict[str, float]) -> None:
        if not self._live or step <= self._skip_upto:
            return
        self._last_step = max(self._last_step, int(step))
        values = {}
        for key, value in metrics.items():
            name = self._names.get(key)
            if name is None:
                constant = key in self._constant_names or key.startswith(self._constant_prefixes)
                name = self._names[key] = "" if constant else store.sanitize_key(key)
            if not name:
                continue
            with contextlib.suppress(TypeError, ValueError):
                values[name] = float(value)
        if values:
            self.run.add(record("metrics", step=int(step), t=now_ms(), values=values))

    def on_eval(self, step: int, metrics: dict[str, float], samples: list[dict]) -> None:
        self.on_metrics(step, metrics)
        self._log_table(SAMPLES_DIR, step, samples)

    def on_rollouts(self, step: int, rows: list[dict]) -> None:
        self._log_table(ROLLOUTS_DIR, step, rows)

    def on_checkpoint(self, step: int, path: Path) -> None:
        if not self._live:
            return
        if self.gated and step > self._gate:
            self._gate = step
            self.run.link.checkpoint_step = int(step)
            self.run.link.save(self.run_dir)
        self._request()

    def on_artifact(self, path: Path, artifact_path: str | None = None) -> None:
        if not self._live:
            return
        self.run.add(record("artifact", path=str(Path(path).resolve()),
                            artifact_path=artifact_path))
        if artifact_path == MODEL_ARTIFACT:  # the exported policy: the run's model output
            self.run.add(record("model", artifact_path=artifact_path, step=self._last_step))
        self._request()

    def on_run_end(self, status: str, summary: dict[str, Any]) -> None:
        """Final records, then a bounded wait for the writer; signal-safe (only it writes)."""
        if not self._live:
            return
        self._ended = True
        interrupted_add = self.run.adding  # a signal landed inside add(): see below
        if self._system is not None and not interrupted_add:
            self._system.stop()
        # The figures summary.json has, so every view of the run shows the same ones.
        ends = {k: summary[k] for k in ("wall_s", "steps_done") if summary.get(k) is not None}
        if summary.get("stop_reason"):  # early stop or pruning: the run says why it is short
            reason = str(summary["stop_reason"])
            ends.update({"stopped": reason.split(":", 1)[0], "stop_reason": reason})
        if ends:
            self.run.add(record("tags", tags=clean_tags({f"rlexp.{k}": v
                                                         for k, v in ends.items()})))
        if self._environment is not None and not interrupted_add:
            self._environment.join(timeout=ENVIRONMENT_WAIT_S)
        for log in sorted(self.run_dir.glob("*.log")):  # Hydra's job log (rlexp.log)
            self.run.add(record("artifact", path=str(log.resolve()), artifact_path=None))
        status = status if status in TERMINAL else "FAILED"
        if status == "FINISHED":
            self._gate = ALWAYS  # the final checkpoint covers every step
        data = redact_obj(json.loads(json.dumps(summary, default=str)))
        self.run.add(record("json", artifact_file="summary.json", data=data))
        self.run.add(record("curves"))
        self.run.add(record("status", status=status, t=end_ms(summary)))
        if interrupted_add:  # waiting for the writer would deadlock: the spool has it all
            warn(f"run ended by a signal during a write; send what is left with: "
                 f"python -m rlexp.sync {self.run_dir}")
            return
        deadline = time.monotonic() + END_BUDGET_S
        ok = self.flush(timeout=END_BUDGET_S)
        for pause in FINAL_RETRY_S:
            if ok or time.monotonic() + pause >= deadline:
                break
            time.sleep(pause)
            ok = self.flush(timeout=max(0.0, deadline - time.monotonic()))
        self._stop_writer()
        held = self.run.waiting("metrics")
        if not ok and self._failure is not None and not store.is_outage(self._failure):
            # A lasting failure: the run is ended in MLflow now, so it does not stay RUNNING.
            rid, final = self.run.link.run_id, "FAILED" if status == "FINISHED" else status
            with contextlib.suppress(Exception):  # the warning says what is left
                if rid is not None:
                    self.run.client.set_terminated(rid, final)
            warn(f"the MLflow run of {self.run_dir} is incomplete and marked FAILED: the "
                 f"store failed a write ({store.first_line(self._failure)}); records wait in "
                 f"{SPOOL_FILE}: fix the cause, then: python -m rlexp.sync {self.run_dir}")
        elif not ok:
            warn(f"the MLflow run of {self.run_dir} is incomplete: records wait in "
                 f"{SPOOL_FILE}; send them with: python -m rlexp.sync {self.run_dir}")
        elif len(self.run.dropped) > 1:
            warn(f"{len(self.run.dropped)} records of the MLflow run of {self.run_dir} were "
                 f"not stored (first: {self.run.dropped[0]})")
        elif held:
            print(f"rlexp: tracking: {held} metric records after the last checkpoint (step "
                  f"{self._gate:g}) were not logged; a resume produces them again",
                  file=sys.stderr, flush=True)
        self._release_lock()

    def flush(self, timeout: float | None = None) -> bool:
        """Write what is ready now and wait for it; True if the store took it all."""
        if self._writer is None or not self._writer.is_alive():
            return False
        with self._cv:  # re-entrant (RLock): _request takes it again
            target = self._request()
            served = self._cv.wait_for(lambda: self._done >= target, timeout)
        return served and self._failure is None

    def _request(self) -> int:
        with self._cv:
            self._requested += 1
            self._cv.notify_all()
            return self._requested

    def _write_loop(self) -> None:
        while True:
            with self._cv:
                self._cv.wait_for(lambda: self._requested > self._done or self._stopping,
                                  timeout=max(self.flush_every_s, MIN_PERIOD_S))
                target, stopping = self._requested, self._stopping
                if stopping and target <= self._done:
                    return  # stopped with nothing asked for (a crash in tests, or the end)
            self._write()
            with self._cv:
                self._done = max(self._done, target)
                self._cv.notify_all()
            if stopping:
                return

    def _write(self) -> bool:
        """One flush of the ready records. Never raises: unreachable means 'spooled, retry'."""
        assert self.run is not None
        try:
            sent = self.run.flush(self._gate)
        except Exception as exc:  # tracking must never stop training
            self._say_dropped()
            if self._failure is None:
                what = "unreachable" if store.is_outage(exc) else "refused a write"
                warn(f"MLflow store {self.uri} {what} ({store.first_line(exc)}); training goes "
                     f"on, records are kept in {self.run_dir / SPOOL_FILE} and retried every "
                     f"{self.flush_every_s:g}s (or: python -m rlexp.sync {self.run_dir})")
            self._failure = exc
            return False
        self._say_dropped()
        if self._failure is not None:
            self._failure = None
            print(f"rlexp: tracking: MLflow store reachable again; sent {sent} spooled records",
                  file=sys.stderr, flush=True)
        return True

    def _say_dropped(self) -> None:
        """Records dropped for a lasting reason: the first in a line, once; the count at the end."""
        assert self.run is not None
        if self.run.dropped and not self._dropped_said:
            self._dropped_said = True
            warn(f"MLflow store {self.uri} did not take {self.run.dropped[0]}; not retried "
                 f"(a lasting failure, not an outage), the rest of the run is logged")

    def _stop_writer(self) -> None:
        with self._cv:
            self._stopping = True
            self._cv.notify_all()
        if self._writer is not None and self._writer is not threading.current_thread():
            self._writer.join(timeout=1.0)  # it is idle or mid-write (daemon: never blocks exit)
        assert self.run is not None
        if self._writer is None or not self._writer.is_alive():
            self.run.close()

    @property
    def _live(self) -> bool:
        return self.run is not None and not self._ended

    def _start(self, info: RunInfo) -> None:
        link = Link(uri=self.uri, experiment=self.experiment, gated=self.gated)
        link.save(self.run_dir)
        self.run = TrackedRun(self.run_dir, link)
        run_dir = str(self.run_dir.resolve())
        tags = clean_tags({**info.tags, **(info.extra.get("swept_tags") or {}),
                           "rlexp.run_dir": run_dir,
                           "rlexp.dir_name": info.name, "rlexp.total_steps": info.total_steps,
                           **standard_tags(info.tags, {**info.extra, "run_dir": run_dir})})
        # The job's own start (before the engine was built), so MLflow's duration is the job's.
        started = info.extra.get("started")
        t = int(started * 1000) if isinstance(started, (int, float)) else now_ms()
        self.run.add(record("start", name=info.extra.get("run_name") or info.name, tags=tags,
                            t=t, parent_run_id=info.extra.get("parent_run_id")))
        self.run.add(record("params", params=clean_params(info.params)))
        if info.extra.get("config") is not None:  # the resolved config, as a user would write it
            self.run.add(record("text", artifact_file="config.yaml", text=yaml.safe_dump(
                redact_obj(info.extra["config"]), sort_keys=False)))
        inputs = self._dataset_inputs(info.extra.get("datasets"))
        if inputs:
            self.run.add(record("inputs", datasets=inputs))

    def _reopen(self, link: Link, start_step: int, restarted: bool) -> None:
        """Resume from the checkpoint at `start_step`: same MLflow run, nothing twice."""
        link.gated = self.gated
        # Steps up to the old gate were released to the store (or wait in the spool): keep them
        # and ignore their second production (the newest checkpoint proved unusable).
        done = max(link.checkpoint_step, start_step)
        link.checkpoint_step = done
        self.run = TrackedRun(self.run_dir, link)
        # Without a gate every step the store (link.logged_step) or spool has is released: a
        # restart from an earlier step skips them; steps are pure functions of (seed, step).
        if not self.gated:
            spooled = [r["step"] for r in self.run.records if r["kind"] == "metrics"]
            done = max(done, link.logged_step, *spooled)
        link.save(self.run_dir)
        self.run.drop_metrics_after(done)
        self._skip_upto = done
        if self.gated:
            self._gate = done
        self.run.add(record("status", status="RUNNING", t=now_ms()))
        self.run.add(record("tags", tags={"rlexp.resumed_from_step": str(start_step)}))
        rid = link.run_id or "(not created yet)"
        if restarted:
            already = f"; steps up to {done} are logged already and not logged again" \
                if done > 0 else ""
            print(f"rlexp: tracking: no checkpoint to resume from: training restarts from step "
                  f"0 in the same MLflow run {rid}{already}", flush=True)
        else:
            print(f"rlexp: tracking: resuming MLflow run {rid} from step {start_step}", flush=True)

    def _recover_link(self) -> Link | None:
        """tracking.json is damaged: find the run again (summary.json's mlflow_run_id, else the
        store's run tagged with this dir) rather than silently start a second one."""
        aside = Link.set_aside(self.run_dir)
        hint = (read_summary(self.run_dir) or {}).get("mlflow_run_id")
        hint = hint if isinstance(hint, str) else None
        try:
            store.ensure_store(self.uri)
            client = store.client(self.uri)
            rid = store.find_run(client, self.experiment, self.run_dir, hint)
            logged = store.max_logged_step(client, rid) if rid else -1
            where = "the store (runs tagged with this dir)"
        except Exception as exc:  # unreachable: the summary's id is the best there is
            rid, logged = hint, -1
            where = f"summary.json (store unreachable: {store.first_line(exc)})"
        found = (f"; recovered MLflow run {rid} from {where}" if rid is not None else
                 " and no MLflow run of this dir was found; starting a new run")
        warn(f"{self.run_dir / 'tracking.json'} was damaged (kept as {aside.name}){found}")
        if rid is None:
            return None
        link = Link(uri=self.uri, experiment=self.experiment, run_id=rid, gated=self.gated,
                    checkpoint_step=logged if self.gated else -1, logged_step=logged)
        link.save(self.run_dir)
        return link

    def _close_previous(self, link: Link) -> None:
        """This dir starts over (no checkpoint to resume from): finish the run it logged to."""
        old = TrackedRun(self.run_dir, link)
        try:
            gate = link.checkpoint_step if link.gated else ALWAYS
            if link.run_id is not None and old.client.get_run(link.run_id).info.status == "RUNNING":
                old.add(record("status", status="KILLED", t=now_ms()))
            old.flush(gate)
            old.close()
            (self.run_dir / SPOOL_FILE).unlink(missing_ok=True)
        except Exception as exc:
            old.close()
            kept = self.run_dir / f"tracking_spool.previous-{link.run_id or 'unsent'}.jsonl"
            if (self.run_dir / SPOOL_FILE).exists():
                (self.run_dir / SPOOL_FILE).replace(kept)
            warn(f"could not close the previous MLflow run {link.run_id} of {self.run_dir} "
                 f"({store.first_line(exc)}); its unsent records are kept in {kept.name}")

    def _log_table(self, folder_name: str, step: int, rows_in: list[dict]) -> None:
        """One MLflow table per step in <folder_name>/, in mlflow.loggedArtifacts for the UI."""
        if not self._live or step <= self._skip_upto or not rows_in:
            return
        columns = list(dict.fromkeys(k for row in rows_in for k in row))
        rows = redact_obj([[_jsonable(r.get(c)) for c in columns] for r in rows_in])
        folder = self.run_dir / folder_name
        folder.mkdir(exist_ok=True)
        path = folder / f"step_{int(step):06d}.json"
        path.write_text(json.dumps({"columns": columns, "data": rows}))
        self.run.add(record("artifact", path=str(path.resolve()), artifact_path=folder_name))
        per_dir = MAX_LISTED_TABLES // len(TABLE_DIRS)
        listed = []
        for name in TABLE_DIRS:
            tables = sorted(p.name for p in (self.run_dir / name).glob("step_*.json"))
            listed += [{"path": f"{name}/{t}", "type": "table"} for t in tables[-per_dir:]]
        self.run.add(record("tags", tags={"mlflow.loggedArtifacts": json.dumps(listed)}))
        self._request()

    def _keep_environment(self, dirty: bool) -> None:
        try:
            env = redact_obj(environment())
            self.run.add(record("json", artifact_file="environment.json", data=env))
            self.run.add(record("text", artifact_file="requirements.txt", text=requirements(env)))
            diff = git_diff() if dirty else None
            if diff:
                self.run.add(record("text", artifact_file="diff.patch", text=redact_text(diff)))
            self._request()
        except Exception as exc:  # a nicety: never stop the run
            warn(f"environment not logged: {store.first_line(exc)}")

    def _dataset_inputs(self, datasets: dict | None) -> list[dict]:
        """{'name', 'source', 'train': [examples], 'eval': [...]} -> MLflow dataset inputs."""
        out = []
        for context in ("train", "eval"):
            if (datasets or {}).get(context):
                try:
                    out.append(dataset_input(f"{datasets['name']}-{context}",
                                             str(datasets.get("source", datasets["name"])),
                                             context, redact_obj(rows_of(datasets[context]))))
                except Exception as exc:  # a run input is a nicety: never stop the run
                    warn(f"dataset {context} not logged as an MLflow input: "
                         f"{store.first_line(exc)}")
        return out

    def _release_lock(self) -> None:
        if self._lock is not None:
            self._lock.close()  # closing releases the flock
            self._lock = None


# MLflow's system-metrics monitor warns when a sample races the run's end ("Failed to log system
# metrics: ... already terminated"): nothing to act on; its lines go to the job's log only.
SYSTEM_METRICS_LOGGER = "mlflow.system_metrics"


def log_file_only(name: str) -> None:
    """Logger `name` writes to the job's log files (<run dir>/rlexp.log), not the console; MLflow's
    loggers don't propagate (mlflow/utils/logging_utils.py), so handlers go on it. Idempotent."""
    logger = logging.getLogger(name)
    files = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    logger.handlers = [h for h in logger.handlers if isinstance(h, logging.FileHandler)] + \
        [h for h in files if h not in logger.handlers]
    logger.propagate = False


PROGRESS_BAR = "MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR"


def recorded_run(uri: str, experiment: str, run_dir: Path) -> dict[str, Any] | None:
    """The MLflow run of `run_dir` as a rerun finds it, its summary.json under "summary" (None if
    missing); None without one or a store answering now. Never raises nor creates anything."""
    link = Link.load(run_dir)
    hint = link.run_id if link is not None and same_store(link.uri, uri) else None
    path = store.sqlite_path(uri)
    if path is not None and not path.is_file():
        return None
    try:
        store.ensure_store(uri)
        client = store.client(uri)
        rid = store.find_run(client, experiment, run_dir, hint)
        if rid is None:
            return None
        run = client.get_run(rid)
    except Exception:  # unreachable or refused: the caller falls back on the checkpoint
        return None
    bar = os.environ.get(PROGRESS_BAR)
    os.environ[PROGRESS_BAR] = "false"  # MLflow draws a bar for each download otherwise
    try:
        with tempfile.TemporaryDirectory() as tmp:
            local = client.download_artifacts(rid, "summary.json", tmp)
            summary = json.loads(Path(local).read_text())
    except Exception:  # never sent (the run ended before it), or unreadable
        summary = None
    finally:
        if bar is None:
            os.environ.pop(PROGRESS_BAR, None)
        else:
            os.environ[PROGRESS_BAR] = bar
    return {"run_id": rid, "status": run.info.status, "start_time": run.info.start_time,
            "end_time": run.info.end_time, "tags": dict(run.data.tags),
            "metrics": dict(run.data.metrics),
            "summary": summary if isinstance(summary, dict) else None}


def _jsonable(value: Any) -> Any:
    if value is None or isinstance(value, (str, int, float, bool)):
        return value
    try:
        return value.item()  # numpy scalars
    except AttributeError:
        return str(value)
