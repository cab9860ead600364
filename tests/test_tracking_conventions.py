"""What MLflow users expect of a run (experiment type, source/user/git tags, a short name,
dataset inputs, config.yaml, system metrics, no constant series) and the FLOP count behind
perf/mfu. The listener runs against a real sqlite store."""

from __future__ import annotations

import time
from pathlib import Path

import numpy as np

import pytest
from mlflow import MlflowClient

from rlexp.base.events import RunInfo
from rlexp.planning.perf import train_flops_per_token, utilization
from rlexp.tracking import prepare_store
from rlexp.tracking.conventions import (constant_metrics, display_name, swept_keys,
                                        swept_tags)
from rlexp.tracking.listener import MlflowListener

CHOICES = {"algo": "grpo", "model": "tiny", "dataset": "arithmetic", "hardware": "cpu"}


# ------------------------------------------------------------------------------- pure

@pytest.mark.parametrize("overrides,swept,expected", [
    ([], None, "grpo-tiny-arithmetic-cpu"),
    (["train.steps=2", "run.progress=false"], None, "steps=2 (grpo-tiny-arithmetic-cpu)"),
    (["algo.beta=0.04", "algo.epsilon=0.2", "train.steps=2"], ["algo.beta", "algo.epsilon"],
     "β=0.04 ε=0.2"),
    (["algo.beta=0.04", "algo.num_generations=4"], ["algo.beta", "algo.num_generations"],
     "β=0.04 G=4"),
    (["algo=gspo", "algo.beta=0.0123456789"], ["algo", "algo.beta"], "gspo β=0.01235"),
    (["train.seed=1", "dataset.seed=2"], ["train.seed", "dataset.seed"],
     "train.seed=1 dataset.seed=2"),
    (["experiment=quick"], None, "quick (grpo-tiny-arithmetic-cpu)"),
])
def test_display_name_leads_with_what_differs(overrides, swept, expected):
    assert display_name(None, CHOICES, overrides, swept) == expected


def test_display_name_of_a_4_job_sweep_tells_jobs_apart():
    jobs = [[f"algo.beta={b}", f"algo.epsilon={e}", "train.steps=2"]
            for b in ("0", "0.04") for e in ("0.1", "0.2")]
    names = [display_name(None, CHOICES, j, ["algo.beta", "algo.epsilon"]) for j in jobs]
    # unique, and short enough for MLflow's default run-name column (~20 characters)
    assert len(set(names)) == 4 and all(len(n) <= 12 for n in names), names
    assert swept_tags(jobs[3], ["algo.beta", "algo.epsilon"]) == {
        "sweep.algo.beta": "0.04", "sweep.algo.epsilon": "0.2"}
    assert display_name("mine", CHOICES, jobs[0], ["algo.beta"]) == "mine"  # tracker.run_name


def test_swept_keys_from_the_command_line_and_sweep_files():
    keys = swept_keys(["algo.beta=0,0.04", "train.steps=2", "+sweep=x", "algo=grpo,gspo"],
                      {"algo.epsilon": "interval(0.05, 0.3)", "algo.num_iterations": "2",
                       "train.learning_rate": "tag(log, interval(1e-4, 1e-2))"})
    assert sorted(keys) == ["algo", "algo.beta", "algo.epsilon", "train.learning_rate"]


def test_sweep_parent_name():
    from rlexp.tracking.conventions import sweep_display_name

    assert sweep_display_name(["+sweep=optuna", "train.steps=2"],
                              ["algo.beta", "train.learning_rate"], "dir") == \
        "sweep optuna: beta,learning_rate"
    assert sweep_display_name(["algo.beta=0,0.04"], ["algo.beta"], "dir") == "sweep: beta"
    assert sweep_display_name([], [], "beta0_0.04_abc") == "beta0_0.04_abc"


def test_constant_series_only_on_policy():
    """On-policy, the loss's ratio statistics are left out (the ratio is 1); the share of
    completions cut at the length limit (train/clipped_ratio) is not one of them."""
    from rlexp.engine.algo_registry import AUX_KEYS

    names, prefixes = constant_metrics(num_iterations=1, batch_size=8, mini_batch_size=None)
    logged = [f"train/{k}" for k in AUX_KEYS] + ["train/clipped_ratio", "train/reward_mean"]
    dropped = {k for k in logged if k.startswith(prefixes)}
    assert names == {"eval/k"} and dropped == {
        "train/ratio_mean", "train/ratio_max", "train/ratio_min", "train/clip_fraction",
        "train/clip_ratio/low_mean", "train/clip_ratio/high_mean", "train/clip_ratio/region_mean"}
    assert constant_metrics(2, 8, None)[1] == ()  # off-policy: the ratio varies
    assert constant_metrics(1, 8, 4)[1] == ()     # two mini-batches: the second is off-policy
    # sampled ahead: the ratio is against the behaviour log-probs, the staleness's signal
    assert constant_metrics(1, 8, None, off_policy_steps=1)[1] == ()


def test_flops_by_hand():
    # N=1000, L=2, H=4, Q=16, T=40: 6*1000 + 12*2*4*16*40 = 6000 + 61440
    assert train_flops_per_token(1000, 2, 4, 16, 40) == pytest.approx(67440.0)
    out = utilization(flops=2e12, seconds=0.5, peak_tflops=8.0)
    assert out["perf/tflops"] == pytest.approx(4.0) and out["perf/mfu"] == pytest.approx(0.5)
    assert utilization(1e12, 0.0, 8.0) == {}


def test_no_mfu_without_a_real_peak(compose_config):
    """The CPU profile has no datasheet peak, and an emulated profile's is not the run's: no
    perf/mfu (a nominal 1 TFLOP/s made it equal perf/tflops), perf/tflops still."""
    from rlexp.planning.perf import peak_tflops

    assert utilization(2e12, 0.5, None) == {"perf/tflops": pytest.approx(4.0)}
    assert peak_tflops(compose_config()) is None  # hardware=cpu
    emulated = compose_config("hardware=v6e-8", "hardware.emulate=true")
    assert peak_tflops(emulated) is None


def test_step_flops_counts_padded_sequences_and_iterations():
    from rlexp.config.schema import Config
    from rlexp.planning.memory import param_count
    from rlexp.planning.perf import step_flops

    cfg = Config()
    cfg.algo.num_iterations = 2
    seq = cfg.rollout.max_prompt_length + cfg.rollout.max_completion_length
    m = cfg.model
    per_token = 6 * param_count(m) + 12 * m.num_layers * m.num_heads * m.head_dim * seq
    assert step_flops(cfg, 16) == pytest.approx(per_token * seq * 16 * 2)


# ------------------------------------------------------------------------------- the store

class Ex:
    def __init__(self, i):
        self.prompt, self.answer, self.question = f"{i}+1=", str(i + 1), f"{i}+1"


def git_repo(path: Path, dirty: bool) -> Path:
    """A one-commit git checkout at `path`; `dirty`: a tracked file changed since."""
    import subprocess

    path.mkdir(parents=True)
    env = {**__import__("os").environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@t",
           "GIT_COMMITTER_NAME": "t", "GIT_COMMITTER_EMAIL": "t@t"}
    (path / "train.py").write_text("lr = 1e-3\n")
    for cmd in (["git", "init", "-q"], ["git", "add", "train.py"],
                ["git", "commit", "-q", "-m", "first"]):
        subprocess.run(cmd, cwd=path, check=True, env=env, capture_output=True)
    if dirty:
        (path / "train.py").write_text("lr = 3e-4\n")
    return path


def test_git_diff_of_a_dirty_checkout_only(tmp_path):
    from rlexp.tracking.environment import git_diff

    assert git_diff(git_repo(tmp_path / "clean", dirty=False)) is None
    diff = git_diff(git_repo(tmp_path / "dirty", dirty=True))
    assert "-lr = 1e-3" in diff and "+lr = 3e-4" in diff
    assert git_diff(tmp_path) is None  # not a checkout


def test_git_tags_name_the_commit_and_whether_tracked_files_changed(tmp_path):
    import subprocess

    from rlexp.tracking.environment import git_tags

    clean = git_repo(tmp_path / "clean", dirty=False)
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=clean, capture_output=True,
                          text=True, check=True).stdout.strip()
    assert git_tags(clean) == {"git.commit": head, "git.dirty": "false"}
    assert git_tags(git_repo(tmp_path / "dirty", dirty=True))["git.dirty"] == "true"
    (clean / "new.txt").write_text("untracked")  # untracked files do not make it dirty
    assert git_tags(clean)["git.dirty"] == "false"
    assert git_tags(tmp_path) == {"git.commit": "unknown", "git.dirty": "unknown"}


def test_version_tags_name_rlexp_tunix_and_jax():
    from importlib.metadata import version

    from rlexp.tracking.environment import version_tags

    assert version_tags() == {"version.rlexp": version("rlexp"),
                              "version.tunix": version("google-tunix"),
                              "version.jax": version("jax")}


def test_a_run_looks_like_a_training_run_in_mlflow(tmp_path, monkeypatch):
    import mlflow

    from rlexp.tracking import listener as listener_module
    from rlexp.tracking.environment import git_diff

    repo = git_repo(tmp_path / "code", dirty=True)  # the code the run was started from
    monkeypatch.setattr(listener_module, "git_diff", lambda: git_diff(repo))
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    prepare_store(uri)
    run_dir = tmp_path / "run"
    listener = MlflowListener(uri=uri, experiment="conv", run_dir=run_dir, gated=False,
                              flush_every_s=0.1, constant=constant_metrics(1, 8, None),
                              system_metrics_every_s=0.2)
    tags = {"algo": "grpo", "git.commit": "abc123", "git.dirty": "true",
            "command": "python -m rlexp algo.beta=0.04"}
    started = time.time() - 30.0  # the job started 30 s before its listeners (engine build)
    extra = {"run_name": "beta=0.04", "started": started,
             "swept_tags": {"sweep.algo.beta": "0.04"},
             "config": {"algo": {"beta": 0.04}, "tracker": {
        "uri": "https://user:hunter2@host/x"}}, "user_tags": {"team": "rl"},
             "datasets": {"name": "arithmetic", "source": "arithmetic",
                          "train": [Ex(i) for i in range(10)], "eval": [Ex(i) for i in range(3)]}}
    listener.on_run_start(RunInfo(name="grpo-tiny-long-dir-name_abc", run_dir=run_dir,
                                  params={"algo.beta": 0.04}, tags=tags, total_steps=2,
                                  extra=extra))
    for step in (1, 2):
        listener.on_metrics(step, {"train/loss": 0.1 * step, "train/ratio_mean": 1.0,
                                   "train/clip_fraction": 0.0, "train/entropy": 2.0 - step,
                                   "train/completion_length_max": 8.0})
    listener.on_eval(2, {"eval/accuracy": 0.5, "eval/k": 4.0}, [{"q": "1+1", "a": "2"}])
    listener.on_rollouts(2, [{"prompt": "1+1=", "completion": "<answer>2</answer>",
                              "answer_exact": 1.0, "reward": 1.0, "advantage": 0.5,
                              "length": 5, "truncated": False}])
    model = tmp_path / "export"
    model.mkdir()
    (model / "config.json").write_text("{}")
    listener.on_artifact(model, "model")  # the exported policy (rlexp.export)
    time.sleep(0.6)  # a few samples of the system monitor
    (run_dir / "rlexp.log").write_text("[INFO] step 1\n")  # Hydra's job log
    wall = time.time() - started
    listener.on_run_end("FINISHED", {"steps_done": 2, "stop_reason": "early_stop: stalled",
                                     "started": started, "wall_s": wall})

    client = MlflowClient(uri)
    exp = client.get_experiment_by_name("conv")
    assert exp.tags["mlflow.experimentKind"] == "custom_model_development"
    run = client.search_runs([exp.experiment_id])[0]
    t = run.data.tags
    assert run.info.run_name == "beta=0.04" and t["rlexp.dir_name"] == "grpo-tiny-long-dir-name_abc"
    assert t["mlflow.source.name"] == "python -m rlexp" and t["mlflow.source.type"] == "LOCAL"
    assert t["mlflow.source.git.commit"] == "abc123" and t["mlflow.user"]
    assert "uncommitted" in t["mlflow.note.content"] and t["team"] == "rl"
    assert t["rlexp.stopped"] == "early_stop" and t["rlexp.stop_reason"] == "early_stop: stalled"
    metrics = set(run.data.metrics)
    assert {"train/loss", "train/entropy", "train/completion_length_max",
            "eval/accuracy"} <= metrics
    assert not {"eval/k", "train/ratio_mean", "train/clip_fraction"} & metrics  # constants
    assert any(k.startswith("system/cpu_utilization") for k in metrics), sorted(metrics)
    assert "system/process_rss_megabytes" in metrics
    # the MLflow run lasts what the job did (summary.json's started and wall_s)
    assert run.info.start_time == int(started * 1000)
    assert abs((run.info.end_time - run.info.start_time) / 1000 - wall) < 0.01
    assert t["sweep.algo.beta"] == "0.04"  # a sweep job's full values (its name abbreviates)
    artifacts = {a.path for a in client.list_artifacts(run.info.run_id)}
    assert {"environment.json", "requirements.txt", "diff.patch", "rlexp.log",
            "rollouts"} <= artifacts, artifacts
    rid = run.info.run_id
    env = client.download_artifacts(rid, "environment.json", str(tmp_path / "dl"))
    assert __import__("json").loads(Path(env).read_text())["packages"]["mlflow"] == \
        mlflow.__version__
    reqs = Path(client.download_artifacts(rid, "requirements.txt", str(tmp_path / "dl")))
    assert f"mlflow=={mlflow.__version__}" in reqs.read_text().splitlines()
    patch = Path(client.download_artifacts(rid, "diff.patch", str(tmp_path / "dl")))
    assert "+lr = 3e-4" in patch.read_text()
    table = Path(client.download_artifacts(rid, "rollouts/step_000002.json",
                                           str(tmp_path / "dl")))
    data = __import__("json").loads(table.read_text())
    assert data["columns"] == ["prompt", "completion", "answer_exact", "reward", "advantage",
                               "length", "truncated"]
    assert data["data"] == [["1+1=", "<answer>2</answer>", 1.0, 1.0, 0.5, 5, False]]
    listed = {e["path"] for e in __import__("json").loads(t["mlflow.loggedArtifacts"])}
    assert listed == {"eval_samples/step_000002.json", "rollouts/step_000002.json"}
    inputs = {(i.dataset.name, i.tags[0].value) for i in run.inputs.dataset_inputs}
    assert inputs == {("arithmetic-train", "train"), ("arithmetic-eval", "eval")}
    profile = next(i.dataset.profile for i in run.inputs.dataset_inputs
                   if i.dataset.name == "arithmetic-train")
    assert '"num_rows": 10' in profile
    # a model output makes it a training run (MLflow 3 lists runs without one as evaluations)
    outputs = run.outputs.model_outputs
    assert len(outputs) == 1 and outputs[0].step == 2
    logged = client.get_logged_model(outputs[0].model_id)
    assert logged.name == "policy" and logged.source_run_id == run.info.run_id
    assert logged.tags["rlexp.weights"] == f"runs:/{run.info.run_id}/model"
    config = Path(client.download_artifacts(run.info.run_id, "config.yaml", str(tmp_path)))
    text = config.read_text()
    assert "beta: 0.04" in text and "hunter2" not in text  # redacted like params


def test_jax_memory_is_sampled_on_accelerators_and_on_cpu(monkeypatch):
    """On an accelerator each device's memory_stats (bytes) becomes <platform>_<id>_* in MiB;
    on CPU (memory_stats None, platform cpu) the live arrays' bytes are summed; without JAX
    loaded there is no reader (JAX is never imported for it)."""
    import sys
    import types

    from rlexp.tracking.conventions import jax_memory_reader

    class Device:
        def __init__(self, platform, i, stats):
            self.platform, self.id, self._stats = platform, i, stats

        def memory_stats(self):
            return self._stats

    monkeypatch.delitem(sys.modules, "jax", raising=False)
    assert jax_memory_reader() is None
    arrays = [types.SimpleNamespace(nbytes=3 * 2**20), types.SimpleNamespace(nbytes=2**20)]
    fake = types.SimpleNamespace(local_devices=lambda: [Device("cpu", 0, None)],
                                 live_arrays=lambda: arrays)
    monkeypatch.setitem(sys.modules, "jax", fake)
    assert jax_memory_reader()() == {"jax_live_arrays_megabytes": pytest.approx(4.0)}
    gpus = [Device("gpu", 0, {"bytes_in_use": 3 * 2**20, "peak_bytes_in_use": 5 * 2**20,
                              "bytes_limit": 80 * 2**30}),
            Device("gpu", 1, {"bytes_in_use": 2**19})]
    fake.local_devices = lambda: gpus
    read = jax_memory_reader()
    assert read() == pytest.approx({"gpu_0_memory_usage_megabytes": 3.0,
                                    "gpu_0_memory_peak_megabytes": 5.0,
                                    "gpu_0_memory_limit_megabytes": 80 * 1024,
                                    "gpu_1_memory_usage_megabytes": 0.5})
    gpus[0]._stats["bytes_in_use"] = 2**20  # each call reads the devices again
    assert read()["gpu_0_memory_usage_megabytes"] == pytest.approx(1.0)


def test_rss_and_jax_memory_are_logged_by_rlexps_own_sampler(tmp_path, monkeypatch):
    """SystemMetrics logs this process's RSS and JAX's memory and MLflow's monitors' system/*
    itself (MlflowClient.log_batch, a step per sample, a last one at stop) from one thread:
    MLflow's monitor thread, which reads the run from the store at every sample, never runs; a
    resumed run goes on from the last step."""
    import sys
    import threading
    import types

    from rlexp.tracking.conventions import SystemMetrics

    fake = types.SimpleNamespace(local_devices=lambda: [],
                                 live_arrays=lambda: [types.SimpleNamespace(nbytes=2**21)])
    monkeypatch.setitem(sys.modules, "jax", fake)
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    prepare_store(uri)
    client = MlflowClient(uri)
    run_id = client.create_run(client.create_experiment("sys")).info.run_id
    system = SystemMetrics(uri, run_id, every_s=0.2, resume=False)
    time.sleep(0.7)
    threads = {t.name for t in threading.enumerate()}
    system.stop()
    assert "rlexp-system-metrics" in threads and "SystemMetricsMonitor" not in threads
    rss = client.get_metric_history(run_id, "system/process_rss_megabytes")
    steps = sorted(m.step for m in rss)
    assert len(steps) >= 3 and steps == list(range(len(steps)))
    assert all(m.value > 10 for m in rss)  # MiB of a Python process with MLflow loaded
    live = client.get_metric_history(run_id, "system/jax_live_arrays_megabytes")
    assert [m.value for m in live] == [2.0] * len(steps)
    cpu = client.get_metric_history(run_id, "system/cpu_utilization_percentage")
    assert sorted(m.step for m in cpu) == steps  # one step counter for every system/* key
    assert all(0 <= m.value <= 100 for m in cpu)
    again = SystemMetrics(uri, run_id, every_s=0.2, resume=True)
    again.stop()
    assert max(m.step for m in client.get_metric_history(
        run_id, "system/process_rss_megabytes")) >= len(steps)


def test_system_metrics_get_about_sixty_points_whatever_the_run_length():
    """The sampling interval grows with the run's age (run age / 60, at least 1 s, at most
    tracker.system_metrics_every_s): a 70 s run gets ~60 points, not 7 at a fixed 10 s."""
    from rlexp.tracking.conventions import sampling_interval

    assert sampling_interval(0.0, 10.0) == 1.0
    assert sampling_interval(30.0, 10.0) == 1.0
    assert sampling_interval(300.0, 10.0) == pytest.approx(5.0)
    assert sampling_interval(3600.0, 10.0) == 10.0
    assert sampling_interval(0.0, 0.3) == 0.3  # a cap under 1 s wins
    t, points = 0.0, 0
    while t < 70.0:
        t += sampling_interval(t, 10.0)
        points += 1
    assert 55 <= points <= 70


def test_reward_and_advantage_distributions_by_hand():
    from rlexp.engine.probes import distribution

    values = [0.0, 1.0, 2.0, 3.0, 4.0]  # linear interpolation: p10 = 0.4, p25 = 1.0, ...
    out = distribution("train/reward_dist", values)
    assert out == pytest.approx({"train/reward_dist/min": 0.0, "train/reward_dist/p10": 0.4,
                                 "train/reward_dist/p25": 1.0, "train/reward_dist/p50": 2.0,
                                 "train/reward_dist/p75": 3.0, "train/reward_dist/p90": 3.6,
                                 "train/reward_dist/max": 4.0})
    rng = np.random.default_rng(0)
    x = rng.normal(size=64)
    got = distribution("a", x)
    assert got["a/p75"] == pytest.approx(np.quantile(x, 0.75))
    assert distribution("a", []) == {}


def test_rollout_rows_by_hand():
    from rlexp.engine.probes import rollout_rows

    rows = rollout_rows(["1+1=", "1+1="], ["<answer>2</answer>", "2 2 2 2"],
                        {"format_exact": [0.5, 0.0], "answer_exact": [1.0, 0.0]},
                        np.array([0.7071, -0.7071]), [5, 8], max_tokens=8)
    assert rows == [
        {"prompt": "1+1=", "completion": "<answer>2</answer>", "format_exact": 0.5,
         "answer_exact": 1.0, "reward": 1.5, "advantage": pytest.approx(0.7071), "length": 5,
         "truncated": False},
        {"prompt": "1+1=", "completion": "2 2 2 2", "format_exact": 0.0, "answer_exact": 0.0,
         "reward": 0.0, "advantage": pytest.approx(-0.7071), "length": 8, "truncated": True}]


def test_mlflow_monitors_read_as_mlflows_loop_reads_them():
    """MLflow's own CPU monitor through mlflow_monitors: with 3 samples before logging
    (MLFLOW_SYSTEM_METRICS_SAMPLES_BEFORE_LOGGING), two calls give nothing, the third the means."""
    from mlflow.system_metrics.metrics.cpu_monitor import CPUMonitor

    from rlexp.tracking.conventions import mlflow_monitors

    monitor = CPUMonitor()
    read = mlflow_monitors([monitor], samples=3)
    assert read() == {} and read() == {}
    assert len(monitor.metrics["cpu_utilization_percentage"]) == 2
    out = read()
    assert 0 <= out["cpu_utilization_percentage"] <= 100 and "system_memory_usage_megabytes" in out
    assert not monitor.metrics  # cleared: the next mean starts afresh
    assert mlflow_monitors([monitor])().keys() == out.keys()
