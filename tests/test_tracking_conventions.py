"""What MLflow users expect of a run (experiment type, source/user/git tags, a short name,
dataset inputs, config.yaml, system metrics, no constant series) and the FLOP count behind
perf/mfu. The listener runs against a real sqlite store."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from rlexp.base.events import RunInfo
from rlexp.planning.perf import train_flops_per_token, utilization
from rlexp.tracking import prepare_store
from rlexp.tracking.conventions import constant_metrics, display_name, swept_keys
from rlexp.tracking.listener import MlflowListener

CHOICES = {"algo": "grpo", "model": "tiny", "dataset": "arithmetic", "hardware": "cpu"}


# ------------------------------------------------------------------------------- pure

@pytest.mark.parametrize("overrides,swept,expected", [
    ([], None, "grpo-tiny-arithmetic-cpu"),
    (["train.steps=2", "run.progress=false"], None, "steps=2 (grpo-tiny-arithmetic-cpu)"),
    (["algo.beta=0.04", "algo.epsilon=0.2", "train.steps=2"], ["algo.beta", "algo.epsilon"],
     "beta=0.04,epsilon=0.2"),
    (["algo=gspo", "algo.beta=0.0123456789"], ["algo", "algo.beta"], "beta=0.01235,gspo"),
    (["experiment=quick"], None, "quick (grpo-tiny-arithmetic-cpu)"),
])
def test_display_name_leads_with_what_differs(overrides, swept, expected):
    assert display_name(None, CHOICES, overrides, swept) == expected


def test_display_name_of_a_4_job_sweep_tells_jobs_apart():
    jobs = [[f"algo.beta={b}", f"algo.epsilon={e}", "train.steps=2"]
            for b in ("0", "0.04") for e in ("0.1", "0.2")]
    names = [display_name(None, CHOICES, j, ["algo.beta", "algo.epsilon"]) for j in jobs]
    assert len(set(names)) == 4 and all(len(n) <= 22 for n in names)
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
    names, prefixes = constant_metrics(num_iterations=1, batch_size=8, mini_batch_size=None)
    assert names == {"eval/k"} and "train/ratio" in prefixes and "train/clip" in prefixes
    assert constant_metrics(2, 8, None)[1] == ()  # off-policy: the ratio varies
    assert constant_metrics(1, 8, 4)[1] == ()     # two mini-batches: the second is off-policy


def test_flops_by_hand():
    # N=1000, L=2, H=4, Q=16, T=40: 6*1000 + 12*2*4*16*40 = 6000 + 61440
    assert train_flops_per_token(1000, 2, 4, 16, 40) == pytest.approx(67440.0)
    out = utilization(flops=2e12, seconds=0.5, peak_tflops=8.0)
    assert out["perf/tflops"] == pytest.approx(4.0) and out["perf/mfu"] == pytest.approx(0.5)
    assert utilization(1e12, 0.0, 8.0) == {}


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


def test_a_run_looks_like_a_training_run_in_mlflow(tmp_path):
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    prepare_store(uri)
    run_dir = tmp_path / "run"
    listener = MlflowListener(uri=uri, experiment="conv", run_dir=run_dir, gated=False,
                              flush_every_s=0.1, constant=constant_metrics(1, 8, None),
                              system_metrics_every_s=0.2)
    tags = {"algo": "grpo", "git.commit": "abc123", "git.dirty": "true",
            "command": "python -m rlexp algo.beta=0.04"}
    extra = {"run_name": "beta=0.04", "config": {"algo": {"beta": 0.04}, "tracker": {
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
    model = tmp_path / "export"
    model.mkdir()
    (model / "config.json").write_text("{}")
    listener.on_artifact(model, "model")  # the exported policy (rlexp.export)
    time.sleep(0.6)  # a few samples of the system monitor
    listener.on_run_end("FINISHED", {"steps_done": 2, "stop_reason": "early_stop: stalled"})

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


def test_jax_device_memory_is_sampled_on_accelerators_only(monkeypatch):
    """On an accelerator each device's memory_stats (bytes) becomes system/<platform>_<id>_*
    in MiB; on CPU (memory_stats None, platform cpu) there is no such monitor."""
    import sys
    import types

    from rlexp.tracking.conventions import _jax_memory_monitor

    class Device:
        def __init__(self, platform, i, stats):
            self.platform, self.id, self._stats = platform, i, stats

        def memory_stats(self):
            return self._stats

    fake = types.SimpleNamespace(local_devices=lambda: [Device("cpu", 0, None)])
    monkeypatch.setitem(sys.modules, "jax", fake)
    assert _jax_memory_monitor() is None
    gpus = [Device("gpu", 0, {"bytes_in_use": 3 * 2**20, "peak_bytes_in_use": 5 * 2**20,
                              "bytes_limit": 80 * 2**30}),
            Device("gpu", 1, {"bytes_in_use": 2**19})]
    fake.local_devices = lambda: gpus
    monitor = _jax_memory_monitor()
    monitor.collect_metrics()
    gpus[0]._stats["bytes_in_use"] = 2**20  # a second sample: the two are averaged
    monitor.collect_metrics()
    out = monitor.aggregate_metrics()
    assert out["gpu_0_memory_usage_megabytes"] == pytest.approx(2.0)
    assert out["gpu_0_memory_peak_megabytes"] == pytest.approx(5.0)
    assert out["gpu_0_memory_limit_megabytes"] == pytest.approx(80 * 1024)
    assert out["gpu_1_memory_usage_megabytes"] == pytest.approx(0.5)
