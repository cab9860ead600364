"""The command line as a user meets it: mistakes refused at start in one line (exit 2, nothing
written), dry runs that write nothing, quiet and honest output. Pre-flight imports no JAX, so
all but the last test here are fast."""

from __future__ import annotations

import io
import json
import logging
import sys
from pathlib import Path

import pytest

from rlexp.job import guards
from rlexp.launch.preflight import preflight
from rlexp.config.schema import Config
from rlexp.job.console import ConsoleListener, quiet_third_party
from rlexp.base.errors import UserError
from rlexp.base.events import RunInfo
from helpers import cli, one_line_exit_2, said

# ---------------------------------------------------------------------------- helpers


def _refused(overrides: list[str]) -> str:
    with pytest.raises(UserError) as err:
        preflight(overrides)
    message = str(err.value)
    assert "\n" not in message
    return message


# ------------------------------------------------------------ refusals in pre-flight


@pytest.mark.parametrize("overrides,needles", [
    (["tracker.uri=file:///tmp/mlruns"], ["tracker.uri=file:///tmp/mlruns", "file store"]),
    (["tracker.uri=bogus://x"], ["tracker.uri=bogus://x", "valid schemes are sqlite, http"]),
    (["tracker.uri=/just/a/path"], ["tracker.uri=/just/a/path", "file store"]),
    (["tracker.experiment="], ["tracker.experiment=''"]),
    (["tracker.uri=http://u:Hidden1234@h/x", "tracker.experiment= "], ["tracker.experiment"]),
    (["model.chat_template=true"], ["model.chat_template=true", "model.tokenizer=char"]),
    (["-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=0", "train.seed=0,1"],
     ["hydra.launcher.n_jobs=0", ">= 1"]),
])
def test_settings_that_cannot_work_are_refused(overrides, needles):
    message = _refused(overrides)
    for needle in needles:
        assert needle in message, message


def test_good_tracking_uris_pass():
    for uri in ("sqlite:///x/mlflow.db", "http://127.0.0.1:5000", "https://h", "databricks",
                "postgresql+psycopg2://u:p@h/db", "mysql://h/db", "mssql+pyodbc://h/db"):
        pre = preflight([f"tracker.uri={uri}", "run.dry_run=true"])
        assert pre.jobs[0].tracker.uri == uri


def test_tracking_uri_from_the_environment_is_checked(monkeypatch):
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "bogus://x")
    assert "MLFLOW_TRACKING_URI=bogus://x" in _refused(["run.dry_run=true"])


def test_rollout_vllm_needs_vllm(monkeypatch, tmp_path):
    import importlib.util

    if importlib.util.find_spec("vllm") is not None:
        pytest.skip("vllm is installed here: the refusal cannot show")
    monkeypatch.setenv("RLEXP_VLLM_VENV", str(tmp_path))  # no vLLM venv to re-run in either
    assert "pip install 'rlexp[vllm]'" in _refused(["rollout=vllm"])


def test_cache_dir_that_is_a_file(tmp_path):
    a_file = tmp_path / "cache"
    a_file.write_text("not a dir")
    message = _refused([f"run.cache_dir={a_file}"])
    assert f"run.cache_dir={a_file} is a file" in message


def test_binary_dataset_file(tmp_path):
    blob = tmp_path / "train.jsonl"
    blob.write_bytes(bytes(range(256)) * 64)
    message = _refused(["dataset=gsm8k", f"dataset.path={blob}"])
    assert f"dataset.path={blob} is not a UTF-8 text file" in message


def test_tokenizer_without_chat_template(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    (model / "model.safetensors").write_bytes(b"")
    (model / "tokenizer_config.json").write_text(json.dumps({"eos_token": "</s>"}))
    message = _refused(["model=qwen3-0.6b", f"model.path={model}", "run.dry_run=true"])
    assert "model.chat_template=true" in message and str(model) in message
    # With a template the same dir passes this check.
    (model / "tokenizer_config.json").write_text(json.dumps({"chat_template": "{{ x }}"}))
    preflight(["model=qwen3-0.6b", f"model.path={model}", "run.dry_run=true"])


# Out-of-range values: refused by pre-flight in one line, and through the entry point with
# exit 2 before anything is written.
OUT_OF_RANGE = [
    ("rollout.max_prompt_length=-5", "rollout.max_prompt_length=-5 is invalid: must be in [1, 131072]"),
    ("train.learning_rate=inf", "train.learning_rate=inf is invalid: must be in (0, inf)"),
    ("eval.temperature=-1", "eval.temperature=-1.0 is invalid: must be in (0, inf)"),
    ("eval.keep_samples=-1", "eval.keep_samples=-1 is invalid: must be in [0, inf)"),
    ("train.warmup_steps=-3", "train.warmup_steps=-3 is invalid: must be in [0, inf)"),
    ("train.weight_decay=nan", "train.weight_decay=nan is invalid"),
    ("hardware.trainer_fraction=0", "hardware.trainer_fraction=0.0 is invalid: must be in (0, 1]"),
]


@pytest.mark.parametrize("override,needle", OUT_OF_RANGE)
def test_out_of_range_values_are_refused_at_start(override, needle):
    assert needle in _refused([override])


@pytest.mark.parametrize("override,needle", OUT_OF_RANGE)
def test_out_of_range_values_exit_2_with_one_line(tmp_path, override, needle):
    one_line_exit_2(cli(override, cwd=tmp_path), needle)
    assert not (tmp_path / "outputs").exists()


# ----------------------------------------------------------------- launchers, dry runs


def test_slurm_launcher_without_slurm(tmp_path):
    """No sbatch on PATH: one line naming the setup step, no sweep dir, no MLflow parent."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "python").symlink_to(sys.executable)
    proc = cli("-m", "hydra/launcher=rlexp_slurm", "train.seed=0,1", cwd=tmp_path,
               env={"PATH": str(bin_dir)})
    one_line_exit_2(proc, "hydra/launcher=rlexp_slurm needs sbatch", "slurm-client")
    assert not (tmp_path / "outputs").exists()


def test_ray_launcher_without_ray(tmp_path):
    # A PATH without Ray's CLI (python itself is started by its full path).
    proc = cli("-m", "hydra/launcher=rlexp_ray", "train.seed=0,1", cwd=tmp_path,
               env={"PATH": "/usr/bin:/bin"})
    one_line_exit_2(proc, "pip install 'rlexp[ray]'")
    assert not (tmp_path / "outputs").exists()


def test_xpk_launcher_without_xpk(tmp_path):
    proc = cli("-m", "hydra/launcher=xpk", "train.seed=0,1", cwd=tmp_path,
               env={"RLEXP_XPK_BIN": str(tmp_path / "no-such-xpk")})
    one_line_exit_2(proc, "hydra/launcher=xpk needs the xpk CLI")


def test_n_jobs_0_exits_2_without_a_parent_run(tmp_path):
    proc = cli("-m", "hydra/launcher=joblib", "hydra.launcher.n_jobs=0", "train.seed=0,1",
               cwd=tmp_path)
    one_line_exit_2(proc, "hydra.launcher.n_jobs=0")
    assert not (tmp_path / "outputs").exists()  # no store, so no FAILED parent either


def test_multirun_dry_run_writes_nothing(tmp_path):
    proc = cli("-m", "algo.beta=0,0.04,0.08", "algo.num_generations=2,4", "run.dry_run=true",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "a sweep of 6 job(s)" in proc.stdout and proc.stdout.count("rlexp plan") == 6
    assert not (tmp_path / "outputs").exists()  # no job dirs, no multirun.yaml, no store


def test_optuna_dry_run_writes_nothing(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    proc = cli("+sweep=optuna", "run.dry_run=true", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "No trials are completed yet" not in proc.stdout + proc.stderr
    assert "chosen by the sweeper at run time" in proc.stdout
    assert not (tmp_path / "outputs").exists()


def test_single_dry_run_writes_nothing_and_masks_the_uri(tmp_path):
    proc = cli("run.dry_run=true", "tracker.uri=http://alice:Hidden1234@127.0.0.1:1/",
               cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Hidden1234" not in proc.stdout + proc.stderr
    assert "http://alice:***@127.0.0.1:1/" in proc.stdout
    assert not (tmp_path / "outputs").exists()


def test_dry_run_without_model_path_fails_like_the_real_run(tmp_path):
    """The plan is still printed (memory planning needs no weights), then exit 2."""
    proc = cli("model=qwen3-0.6b", "run.dry_run=true", "train.micro_batch_size=1", cwd=tmp_path)
    assert proc.returncode == 2 and "rlexp plan" in proc.stdout, proc.stderr[-2000:]
    lines = said(proc.stderr)
    assert len(lines) == 1 and "model=qwen3-0.6b needs model.path" in lines[0]
    assert not (tmp_path / "outputs").exists()
    proc = cli("model=smollm2-135m", "run.dry_run=true", cwd=tmp_path)  # packaged weights
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_config_yaml_names_the_experiment_group_without_plus():
    from rlexp.config.paths import conf_dir

    text = (conf_dir() / "config.yaml").read_text()
    assert "+experiment=NAME" not in text and "experiment=NAME" in text
    preflight(["experiment=quick", "run.dry_run=true"])  # the form the comment shows works


# ------------------------------------------------------------------ on-policy warning


def _cfg(iterations: int = 1) -> Config:
    cfg = Config()
    cfg.algo.num_iterations = iterations
    return cfg


@pytest.mark.parametrize("overrides,swept,multirun,warns", [
    ([], {}, False, False),                                       # defaults: nothing set
    (["train.steps=2"], {}, False, False),
    (["algo.epsilon=0.1"], {}, False, True),                      # set a knob that cannot act
    (["algo=gspo"], {}, False, True),
    (["algo=grpo"], {}, False, False),                            # grpo is what runs anyway
    (["algo.beta=0,0.04", "algo.epsilon=0.1"], {"algo.beta": ["0", "0.04"]}, True, False),
    (["algo.epsilon=0.1,0.2"], {"algo.epsilon": ["0.1", "0.2"]}, True, True),
])
def test_on_policy_warning_only_for_knobs_the_user_set(overrides, swept, multirun, warns):
    on, off = _cfg(), _cfg(2)
    if "algo=gspo" in overrides:
        on.algo.name = off.algo.name = "gspo"
    line = guards.noop_warning([on], overrides, swept, multirun)
    assert bool(line) is warns, line
    assert guards.noop_warning([off], overrides, swept, multirun) is None  # off-policy


def test_readme_first_sweep_draws_no_warning():
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    line = next(ln for ln in readme.splitlines() if "python -m rlexp -m" in ln)
    args = line.split("python -m rlexp", 1)[1].split("#")[0].split()
    pre = preflight(args)
    assert guards.noop_warning(pre.jobs, pre.overrides, pre.swept, pre.multirun) is None


# ------------------------------------------------------------------------ NaN guard


@pytest.mark.parametrize("metrics,bad", [
    ({"train/loss": 1.0, "train/grad_norm": float("nan")}, ["train/grad_norm"]),
    ({"train/kl": float("inf"), "train/reward_mean": 0.5}, ["train/kl"]),
    ({"train/reward/answer_exact": float("-inf")}, ["train/reward/answer_exact"]),
    ({"train/loss": 0.3, "train/grad_norm": 2.0, "train/kl": 0.0}, []),
    ({"time/step_s": float("nan")}, []),  # not a training signal
])
def test_guard_watches_grad_norm_and_kl(metrics, bad):
    assert guards.nonfinite(metrics) == bad


def test_loop_stops_on_a_nan_grad_norm():
    from rlexp.job.loop import NonFinite, check_finite

    with pytest.raises(NonFinite, match="train/grad_norm=nan"):
        check_finite(3, {"train/loss": 0.1, "train/grad_norm": float("nan")})


# ---------------------------------------------------------------------------- console


def _listener(steps: int, progress: bool = True) -> tuple[ConsoleListener, io.StringIO]:
    cfg = Config()
    cfg.train.steps = steps
    cfg.run.progress = progress
    out = io.StringIO()
    listener = ConsoleListener(cfg, stream=out)  # a StringIO is not a terminal
    listener.on_run_start(RunInfo(name="r", run_dir=None, params={}, tags={}, total_steps=steps))
    return listener, out


EVAL = {"eval/accuracy": 0.25, "eval/format_accuracy": 1.0, "eval/pass_at_k": 0.5,
        "eval/k": 2, "eval/mean_reward": 1.0}


def test_without_a_terminal_progress_is_one_line_per_event():
    listener, out = _listener(100)
    listener.on_eval(0, EVAL, [])
    for step in range(1, 101):
        listener.on_metrics(step, {"train/reward_mean": 1.0, "time/step_s": 0.1})
    listener.on_eval(100, {**EVAL, "eval/accuracy": 0.5}, [])
    listener.on_run_end("FINISHED", {"steps_done": 100, "wall_s": 12.0})
    text = out.getvalue()
    assert "\r" not in text and "\x1b" not in text  # no bar redraws
    steps = [ln for ln in text.splitlines() if ln.startswith("step ")]
    assert steps[0].startswith("step 1/100") and steps[-1].startswith("step 100/100")
    assert 10 <= len(steps) <= 25  # periodic, not one per step
    assert "eval @ step 100: accuracy 0.500" in text
    assert text.strip().splitlines()[-1] == "rlexp: finished after 100 steps in 12s"


def test_progress_false_hides_only_the_bar():
    listener, out = _listener(10, progress=False)
    listener.on_eval(0, EVAL, [])
    for step in range(1, 11):
        listener.on_metrics(step, {"train/reward_mean": 1.0, "time/step_s": 0.1})
    listener.on_eval(10, {**EVAL, "eval/accuracy": 0.5}, [])
    listener.on_run_end("FINISHED", {"steps_done": 10})
    text = out.getvalue()
    assert "step 1/10" not in text and "it/s" not in text
    assert "eval @ step 0" in text and "eval @ step 10" in text
    assert "before" in text and "+0.250" in text  # the final table stays


def test_after_sigterm_the_table_does_not_repeat_the_step_0_eval():
    listener, out = _listener(100)
    listener.on_eval(0, EVAL, [])
    for step in range(1, 8):
        listener.on_metrics(step, {"train/reward_mean": 1.0, "time/step_s": 0.1})
    listener.on_run_end("KILLED", {"steps_done": 7, "eval_before": EVAL, "wall_s": 3.0})
    lines = out.getvalue().strip().splitlines()
    assert not any("after" in ln and "before" in ln for ln in lines)  # no fake after column
    assert lines[-1] == "rlexp: killed after 7 steps in 3s"


def test_stopped_run_shows_its_latest_eval_as_latest():
    listener, out = _listener(100)
    listener.on_eval(0, EVAL, [])
    listener.on_eval(50, {**EVAL, "eval/accuracy": 0.75}, [])
    listener.on_run_end("KILLED", {"steps_done": 60, "eval_before": EVAL})
    text = out.getvalue()
    assert "latest" in text and "+0.500" in text


def test_third_party_noise_is_dropped_and_real_warnings_kept():
    quiet_third_party()
    seen: list[str] = []

    class Keep(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            seen.append(record.getMessage())

    handler = Keep()
    absl, mlflow_log = logging.getLogger("absl"), logging.getLogger("mlflow.store.db.utils")
    absl.addHandler(handler)
    mlflow_log.addHandler(handler)
    logging.getLogger("huggingface_hub").addHandler(handler)
    try:
        absl.warning("Resharding model from None to Mesh('fsdp': 1, 'tp': 1)")
        absl.warning("Skipping non-TPU device: cpu. You might be missing jax[tpu] dependency.")
        mlflow_log.info("Creating initial MLflow database tables...")
        logging.getLogger("huggingface_hub.utils._http").warning(
            "'(MaxRetryError(\"HTTPSConnectionPool(host='huggingface.co', port=443)\"))' thrown "
            "while requesting HEAD https://huggingface.co/x/resolve/main/config.json")
        absl.warning("something a user should see")
    finally:
        absl.removeHandler(handler)
        mlflow_log.removeHandler(handler)
        logging.getLogger("huggingface_hub").removeHandler(handler)
    assert seen == ["something a user should see"]


def test_already_finished_names_the_commit_and_the_way_to_rerun():
    from rlexp.job.resume import already_finished

    line = already_finished(Path("outputs/runs/x"),
                            {"started": 0.0, "wall_s": 1.0, "git_commit": "a" * 40},
                            {"git.commit": "b" * 40, "git.dirty": "false"})
    assert "by commit aaaaaaaaaa" in line and "now at bbbbbbbbbb" in line
    assert "run.resume=false" in line and "\n" not in line


@pytest.mark.parametrize("sweep", [
    ["train.seed=0,1,2", "algo.beta=0,0.04"],
    ["algo=grpo,gspo", "algo.beta=0.0,0.08", "train.steps=3"],
    ["experiment=quick", "algo.beta=0.0,0.08", "+tracker.tags.team=rl"],
    ["hardware=cpu", "train.seed=1,2", "eval.every=0,5", "dataset.seed=3", "++run.progress=false"],
])
def test_jobs_composed_from_an_earlier_job_equal_a_full_compose(sweep, monkeypatch):
    """JobComposer sets a job's plain values on a job composed before instead of composing
    again (a sweep over train.seed composes once): every job's config must equal its own
    full compose."""
    from rlexp.launch.preflight import JobComposer

    args = ["-m", *sweep, "run.dry_run=true"]
    fast = preflight(args)
    monkeypatch.setattr(JobComposer, "reuse", False)
    full = preflight(args)
    assert len(fast.jobs) == len(full.jobs) > 1
    assert fast.jobs == full.jobs
    assert len({(j.train.seed, j.algo.beta, j.algo.name, j.eval.every, j.algo.epsilon)
                for j in fast.jobs}) == len(fast.jobs)


def test_a_bad_value_is_refused_in_every_job_composed_from_an_earlier_one():
    with pytest.raises(UserError, match="algo.beta"):
        preflight(["-m", "algo.beta=0.0,abc", "run.dry_run=true"])


# ---------------------------------------------------------------- argv, --version, counts


def test_a_misplaced_multirun_flag_is_one_line_naming_the_fix(tmp_path):
    proc = cli("hydra/launcher=rlexp_slurm", "-m", "algo.beta=0,0.1", cwd=tmp_path)
    line = one_line_exit_2(proc, "put -m/--multirun first",
                           "python -m rlexp -m hydra/launcher=rlexp_slurm algo.beta=0,0.1")
    assert "usage" not in line and "__main__" not in proc.stderr
    assert not (tmp_path / "outputs").exists()


def test_an_unknown_flag_is_one_line_naming_the_program(tmp_path):
    proc = cli("--no-such-flag", "train.steps=2", cwd=tmp_path)
    one_line_exit_2(proc, "--no-such-flag", "python -m rlexp --help")


def test_two_hydra_commands_at_once_are_one_line(tmp_path):
    proc = cli("-m", "algo.beta=0,0.1", "--cfg", "job", cwd=tmp_path)
    one_line_exit_2(proc, "only one of --run, -m/--multirun, --cfg")


def test_version_names_rlexp_tunix_jax_and_hydra(tmp_path):
    from importlib.metadata import version

    proc = cli("--version", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = [ln for ln in (proc.stdout + proc.stderr).splitlines() if ln.strip()]
    assert len(lines) == 1, lines
    for dist, name in (("rlexp", "rlexp"), ("google-tunix", "Tunix"), ("jax", "JAX"),
                       ("hydra-core", "Hydra")):
        assert f"{name} {version(dist)}" in lines[0], lines[0]


def test_the_optuna_dry_run_counts_its_trials(tmp_path):
    pytest.importorskip("hydra_plugins.hydra_optuna_sweeper")
    proc = cli("+sweep=optuna", "run.dry_run=true", "hydra.sweeper.n_trials=5", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    head = proc.stdout.splitlines()[0]
    assert "a sweep of 5 trial(s)" in head, head
    assert "2 job(s)" not in head


@pytest.mark.slow
def test_a_sweep_past_the_sampled_product_counts_every_job():
    from rlexp.launch.preflight import MAX_PRODUCT

    values = ",".join(str(i) for i in range(MAX_PRODUCT + 1))
    pre = preflight(["-m", f"train.seed={values}", "algo.beta=0,0.04", "run.dry_run=true"])
    assert len(pre.jobs) < 2 * (MAX_PRODUCT + 1)  # pre-flight checks a sample of the jobs
    assert pre.size == 2 * (MAX_PRODUCT + 1)
