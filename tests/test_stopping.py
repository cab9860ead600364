"""Early stopping, sweep pruning (Optuna) and profiler traces: the loop stops, says why, and
the sweep's pruning study prunes a job that trails the others."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlexp.config.schema import Config, EarlyStopConfig, PruneConfig
from rlexp.base.events import Listener, Listeners
from rlexp.job.stopping import EarlyStop, improved

from fake_engine import FakeEngine, evaluate as fake_evaluate


# ------------------------------------------------------------------------------- pure rules

@pytest.mark.parametrize("value,best,mode,delta,expected", [
    (0.5, None, "max", 0.0, True), (0.5, 0.4, "max", 0.0, True), (0.4, 0.4, "max", 0.0, False),
    (0.45, 0.4, "max", 0.1, False), (0.51, 0.4, "max", 0.1, True),
    (0.3, 0.4, "min", 0.0, True), (0.4, 0.4, "min", 0.0, False), (0.35, 0.4, "min", 0.1, False),
])
def test_improved_by_hand(value, best, mode, delta, expected):
    assert improved(value, best, mode, delta) is expected


def test_early_stop_counts_checks_without_improvement():
    stop = EarlyStop(EarlyStopConfig(metric="eval/accuracy", patience=2, mode="max",
                                     min_delta=0.01))
    seq = [(1, 0.2), (2, 0.3), (3, 0.305), (4, 0.31), (5, 0.5), (6, 0.5), (7, float("nan"))]
    answers = [stop.check(s, {"eval/accuracy": v}) for s, v in seq]
    # 0.305 and 0.31 do not beat 0.3 by more than 0.01: the 2nd such check stops (step 4)
    assert answers[:3] == [None, None, None] and answers[3] is not None
    assert "eval/accuracy" in answers[3] and "0.3" in answers[3] and "(step 2)" in answers[3]
    # the counter restarts on an improvement; NaN never counts as one
    assert answers[4] is None and answers[5] is None and answers[6] is not None
    assert stop.check(8, {"train/loss": 1.0}) is None and stop.stale == 2  # other keys: no-op


def test_early_stop_min_mode_and_missing_metric():
    stop = EarlyStop(EarlyStopConfig(metric="train/loss", patience=1, mode="min"))
    assert stop.check(1, {"eval/accuracy": 1.0}) is None  # not the watched metric
    assert stop.check(1, {"train/loss": 1.0}) is None
    assert stop.check(2, {"train/loss": 0.9}) is None
    assert stop.check(3, {"train/loss": 0.95}).startswith("early_stop: train/loss")


# ------------------------------------------------------------------------------- the loop

class Recorder(Listener):
    def __init__(self):
        self.metrics, self.evals, self.artifacts = [], [], []

    def on_metrics(self, step, metrics):
        self.metrics.append((step, dict(metrics)))

    def on_eval(self, step, metrics, samples):
        self.evals.append((step, dict(metrics)))

    def on_artifact(self, path, artifact_path=None):
        self.artifacts.append((Path(path), artifact_path))


def _cfg(steps=20, every=1, **early) -> Config:
    cfg = Config()
    cfg.train.steps, cfg.eval.every = steps, every
    if early:
        cfg.train.early_stop = EarlyStopConfig(**early)
    return cfg


def _run(cfg, curve, tmp_path, monkeypatch, stops=None, step_fn=lambda: None):
    from rlexp.job import loop, stopping

    monkeypatch.setattr(loop, "evaluate", fake_evaluate)  # the name the loop calls
    engine = FakeEngine(cfg, curve=curve, step_fn=step_fn)
    rec = Recorder()
    stops = stops or stopping.make_stops(cfg.train.early_stop, cfg.train.prune, None, "job")
    summary = loop.train_steps(cfg, engine, Listeners([rec]), tmp_path, stops=stops)
    return summary, rec


def test_early_stop_ends_a_run_whose_metric_stalls(tmp_path, monkeypatch):
    cfg = _cfg(steps=20, every=1, metric="eval/accuracy", patience=3)
    # improves until step 4, flat afterwards: checks at 5, 6, 7 are stale -> stop at step 7
    summary, rec = _run(cfg, lambda s: min(s, 4) / 10, tmp_path, monkeypatch)
    assert summary["steps_done"] == 7
    assert summary["stop_reason"].startswith("early_stop: eval/accuracy")
    assert [s for s, _ in rec.metrics] == list(range(1, 8))
    # the final evaluation still runs (after training, at the step it stopped)
    assert rec.evals[-1][0] == 7 and summary["eval_after"]["eval/accuracy"] == pytest.approx(0.4)


def test_a_run_that_keeps_improving_is_not_stopped(tmp_path, monkeypatch):
    cfg = _cfg(steps=6, every=2, metric="eval/accuracy", patience=1)
    summary, _ = _run(cfg, lambda s: s / 10, tmp_path, monkeypatch)
    assert summary["steps_done"] == 6 and "stop_reason" not in summary


def test_phase_times_and_mfu_reach_the_step_metrics(tmp_path, monkeypatch):
    from rlexp.planning.perf import peak_tflops, step_flops

    cfg = _cfg(steps=3, every=1)
    cfg.hardware.peak_bf16_tflops = 8.0  # a profile with a datasheet peak (CPU has none)
    _, rec = _run(cfg, lambda s: 0.1, tmp_path, monkeypatch)
    first, second = rec.metrics[0][1], rec.metrics[1][1]
    assert "time/log_s" in second
    # an evaluation's seconds are one series, time/eval_s at the evaluation's own step (the
    # loop's evaluate phase overlapped it, one step later, as time/evaluate_s)
    assert not any("time/evaluate_s" in m for _, m in rec.metrics)
    assert "time/step_s" in first and "time/data_s" in first
    tflops = step_flops(cfg, 8) / second["time/step_s"] / 1e12
    assert second["perf/tflops"] == pytest.approx(tflops)
    assert second["perf/mfu"] == pytest.approx(tflops / peak_tflops(cfg))


def test_profile_steps_write_a_trace_and_log_it(tmp_path, monkeypatch):
    import jax.numpy as jnp

    cfg = _cfg(steps=4, every=0)
    cfg.run.profile_steps = [2, 3]
    _, rec = _run(cfg, lambda s: 0.1, tmp_path, monkeypatch,
                  step_fn=lambda: (jnp.ones((64, 64)) @ jnp.ones((64, 64))).block_until_ready())
    assert rec.artifacts == [(tmp_path / "profile", "profile")]
    traces = list((tmp_path / "profile").rglob("*.xplane.pb"))
    perfetto = list((tmp_path / "profile").rglob("perfetto_trace.json.gz"))
    assert len(traces) == 1 and traces[0].stat().st_size > 0 and perfetto  # one trace: a..b
    assert traces[0].parent.parent.name == "profile"  # TensorBoard's plugins/profile/<run>/


# ------------------------------------------------------------------------------- pruning

def test_sweep_pruner_prunes_a_job_that_trails_earlier_jobs(tmp_path):
    pytest.importorskip("optuna")
    from rlexp.job.stopping import SweepPruner

    cfg = PruneConfig(pruner="median", metric="eval/accuracy", startup_jobs=2)
    for job in range(3):  # three jobs that learn run to the end
        pruner = SweepPruner(cfg, tmp_path, f"good{job}")
        for step in (1, 2, 3):
            assert pruner.check(step, {"eval/accuracy": 0.2 * step + 0.01 * job}) is None
        pruner.finish("FINISHED", {"eval_after": {"eval/accuracy": 0.6}})
    bad = SweepPruner(cfg, tmp_path, "bad")
    reason = bad.check(1, {"eval/accuracy": 0.05})  # median of the others at step 1 is 0.21
    assert reason is not None and reason.startswith("pruned: eval/accuracy=0.05 at step 1")
    bad.finish("FINISHED", {})
    from rlexp.job.stopping import read_jobs

    jobs = read_jobs(tmp_path / "pruning.jsonl")
    assert [(j["job"], j["state"]) for j in jobs] == [
        ("good0", "COMPLETE"), ("good1", "COMPLETE"), ("good2", "COMPLETE"), ("bad", "PRUNED")]
    assert jobs[-1]["curve"] == {"1": 0.05}


def test_before_the_startup_jobs_nothing_is_pruned(tmp_path):
    pytest.importorskip("optuna")
    from rlexp.job.stopping import SweepPruner

    cfg = PruneConfig(pruner="median", startup_jobs=2)
    first = SweepPruner(cfg, tmp_path, "a")
    assert first.check(1, {"eval/accuracy": 0.9}) is None
    first.finish("FINISHED", {"eval_after": {"eval/accuracy": 0.9}})
    second = SweepPruner(cfg, tmp_path, "b")
    assert second.check(1, {"eval/accuracy": 0.0}) is None  # one finished job < startup_jobs


@pytest.mark.slow
def test_optuna_sweep_prunes_the_trials_that_stall(tmp_path):
    """A real `+sweep=optuna` (Hydra's Optuna sweeper, TPE seed 0, 6 trials in one process)
    whose jobs run rlexp's entry point, loop, tracker and pruner on the scripted engine: a
    learning rate of 1e-2 learns (+0.1 a step), 1e-4 stalls; once two jobs finished, a
    stalling job trails their median at its first evaluation and is pruned."""
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    from fake_engine import sweep_env
    from sweep_helpers import explain, mlflow_children, only_sweep_dir, rlexp, summaries

    proc = rlexp(["+sweep=optuna", "hydra.sweeper.n_trials=6",
                  "train.learning_rate=choice(0.01,0.0001)", "train.prune.pruner=median",
                  "train.steps=4", "eval.every=1", "run.progress=false", "run.export=false"],
                 cwd=tmp_path, env=sweep_env(tmp_path), timeout=600)
    assert proc.returncode == 0, explain(proc)
    sweep = only_sweep_dir(tmp_path)
    jobs = summaries(sweep).values()
    pruned = [s for s in jobs if (s.get("stop_reason") or "").startswith("pruned:")]
    full = [s for s in jobs if "stop_reason" not in s]
    assert len(pruned) + len(full) == 6 and pruned and len(full) >= 2
    assert all(s["status"] == "FINISHED" and s["steps_done"] == 1 for s in pruned)
    assert all(s["steps_done"] == 4 for s in full)
    # the pruned jobs stalled: pruning never hit a learning job
    assert all(s["eval_after"]["eval/accuracy"] < 0.1 for s in pruned)
    _, runs = mlflow_children(sweep)
    tagged = {r.data.tags.get("rlexp.stopped") for r in runs}
    assert sum(r.data.tags.get("rlexp.stopped") == "pruned" for r in runs) == len(pruned)
    assert tagged <= {"pruned", None}
    table = (sweep / "summary.md").read_text()  # the sweep's table says which were pruned
    assert table.count("FINISHED (pruned)") == len(pruned)
