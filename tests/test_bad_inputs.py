"""Bad input through the entry point, one case a row: `python -m rlexp ARGS` in a fresh,
empty working directory must exit 2 with one stderr line `rlexp: error: ...` naming the key,
print nothing on stdout, and leave the directory as empty as it found it (no outputs/, no run
dir, no MLflow store). Every case is a pre-flight refusal (no JAX); none of them is in
test_cli, test_config, test_validation or test_user_code. `{in}` is a directory of inputs
the cases point at (a regular file, an empty dir, an empty jsonl, ...)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from helpers import cli, one_line_exit_2

# (arguments, what the one line must hold: the key and why)
BAD_INPUTS: list[tuple[list[str], list[str]]] = [
    # Upper bounds that name the limit (Reliability round three, 5).
    (["train.steps=99999999999999999999"],
     ["train.steps=99999999999999999999 is invalid: must be in [1, 1000000]"]),
    (["-m", "train.steps=1,2000000"], ["train.steps=2000000 is invalid: must be in [1, 1000000]"]),
    (["train.batch_size=100000"], ["train.batch_size=100000 is invalid: must be in [1, 65536]"]),
    (["algo.num_generations=5000"],
     ["algo.num_generations=5000 is invalid: must be in [2, 1024]"]),
    (["algo.num_iterations=1000"], ["algo.num_iterations=1000 is invalid: must be in [1, 64]"]),
    (["rollout.max_prompt_length=99999999999999999999"],
     ["rollout.max_prompt_length=99999999999999999999 is invalid: must be in [1, 131072]"]),
    (["rollout.max_completion_length=200000"],
     ["rollout.max_completion_length=200000 is invalid: must be in [1, 131072]"]),
    (["rollout.kv_cache_size=1"], ["rollout.kv_cache_size=1 is invalid: must be in [2, 262144]"]),
    (["eval.pass_k=0"], ["eval.pass_k=0 is invalid: must be in [1, 1024]"]),
    (["model.warm_start_steps=-1"],
     ["model.warm_start_steps=-1 is invalid: must be in [0, 1000000]"]),
    (["dataset.max_truncated_fraction=1.5"],
     ["dataset.max_truncated_fraction=1.5 is invalid: must be in [0, 1]"]),
    # Other intervals.
    (["train.seed=-1"], ["train.seed=-1 is invalid: must be in [0, 4294967295]"]),
    (["rollout.top_p=0"], ["rollout.top_p=0.0 is invalid: must be in (0, 1]"]),
    (["reward.functions.0.weight=inf"], ["reward.functions.0.weight=inf is invalid"]),
    # Algorithm values that leave a loss no tokens or no signal.
    (["algo.top_entropy_quantile=0"],
     ["algo.top_entropy_quantile=0.0 is invalid: must be in (0, 1]"]),
    (["algo=clip_cov", "algo.clip_cov_lb=5", "algo.clip_cov_ub=1"],
     ["algo.clip_cov_lb=5.0 is invalid: must be below algo.clip_cov_ub (1.0)"]),
    (["algo=cispo", "algo.delta=2"], ["algo.delta=2.0 is invalid", "ppo_clip or luspo"]),
    (["algo.rollout_correction=token_mask", "algo.rollout_correction_clip_max=0.5"],
     ["algo.rollout_correction_clip_max=0.5 is invalid: must leave 1 within the bounds"]),
    # Values that are not one of the choices.
    (["model.dtype=float16"], ["model.dtype='float16'", "valid choices are float32, bfloat16"]),
    (["train.remat=partial"], ["train.remat='partial'", "none, full, dots_saveable"]),
    (["rollout.name=sglang"], ["rollout.name='sglang'", "valid choices are vanilla, vllm"]),
    (["tracker.name=wandb"], ["tracker.name='wandb'", "valid choices are mlflow, none"]),
    (["train.early_stop.mode=up"], ["train.early_stop.mode='up'", "valid choices are max, min"]),
    (["hardware=gpu", "hardware.gpu_type=a100"],
     ["hardware.gpu_type='a100'", "valid choices are h100, h200"]),
    # Options a config group does not have.
    (["hardware=tpu-v9"], ["hardware=tpu-v9 is not an option of group 'hardware'", "v6e-8"]),
    (["dataset=imagenet"], ["dataset=imagenet is not an option of group 'dataset'", "gsm8k"]),
    (["hydra/launcher=slurmm"], ["hydra/launcher=slurmm is not an option of group "
                                 "'hydra/launcher'", "rlexp_slurm, submitit_local"]),
    # A schema key cannot be deleted: said with what to do instead.
    (["~train.steps"], ["~train.steps is invalid: the schema's keys cannot be deleted",
                        "train.steps=VALUE"]),
    (["~algo"], ["~algo is invalid: it removes the algo group's choice (grpo)",
                 "algo=NAME (valid choices are: cispo, clip_cov"]),
    (["model=gpt2"], ["model=gpt2 is not an option of group 'model'", "smollm2-135m"]),
    # A key given twice (Hydra keeps the last; the run's name carried both).
    (["algo.beta=0.1", "algo.beta=0.2"],
     ["algo.beta is given twice (algo.beta=0.1, algo.beta=0.2): give it once"]),
    (["-m", "algo=grpo,gspo", "+algo=dapo"], ["algo is given twice (algo=grpo,gspo, +algo=dapo)"]),
    # Types and keys.
    (["train.batch_size=eight"], ["train.batch_size='eight' is invalid", "Integer"]),
    (["algo.beta=high"], ["algo.beta='high' is invalid", "Float"]),
    (["train.steps=2.5"], ["train.steps='2.5' is invalid", "Integer"]),
    (["+train.nonexistent=1"], ["train.nonexistent is not a config key", "steps"]),
    # A regular expression compiled at start (config.rules answer_regex_compiles).
    (["dataset.answer_regex='('"], ["dataset.answer_regex='(' is invalid: not a Python "
                                    "regular expression (missing ), unterminated subpattern"]),
    (["-m", "dataset.extractor=regex", "dataset.answer_regex='[0-9',x"],
     ["dataset.answer_regex='[0-9' is invalid: not a Python regular expression"]),
    # Names MLflow cannot take (config.rules tracker_names_within_mlflow_limits).
    ([f"tracker.experiment=team/{'x' * 496}"],
     [f"tracker.experiment='team/{'x' * 35}...(501 characters)' is invalid: MLflow takes "
      "experiment names of at most 500 characters"]),
    # Paths (Reliability round three, 6).
    (["dataset=gsm8k", "dataset.path={in}/data_dir"],
     ["dataset.path={in}/data_dir is a directory, not a file"]),
    (["dataset=gsm8k", "dataset.path={in}/empty.jsonl"],
     ["dataset.path={in}/empty.jsonl: the file is empty"]),
    (["dataset.prompt_file={in}/no_question.txt"],
     ["dataset.prompt_file: the template has no {question} placeholder"]),
    (["dataset.prompt_file={in}/missing.txt"],
     ["dataset.prompt_file={in}/missing.txt: cannot read it"]),
    (["hydra.run.dir={in}/a_file/run"],
     ["hydra.run.dir={in}/a_file/run: {in}/a_file is a file, not a directory"]),
    (["hydra.run.dir={in}/a_file"], ["hydra.run.dir={in}/a_file: {in}/a_file is a file"]),
    (["model=smollm2-135m", "model.path={in}/empty_dir"],
     ["model.path={in}/empty_dir: no config.json"]),
    (["model=qwen3-0.6b", "model.path={in}/config_only"],
     ["model.path={in}/config_only: no *.safetensors weights"]),
    (["run.init_from={in}/empty_dir"], ["run.init_from={in}/empty_dir: no checkpoint found"]),
    # A plan that does not fit (launch.checks.check_fits, once per job, before any launch).
    (["hardware.hbm_gib_per_device=0.001"],
     ["model=tiny hardware=cpu: needs 0.24 GiB per device, has 0.001 (largest item"]),
    (["-m", "hardware.hbm_gib_per_device=24,0.001"],
     ["model=tiny hardware=cpu: needs 0.24 GiB per device, has 0.001 (largest item"]),
]


@pytest.fixture(scope="module")
def inputs(tmp_path_factory) -> Path:
    """What the path cases point at; none of it is valid where it is used."""
    root = tmp_path_factory.mktemp("inputs")
    (root / "a_file").write_text("a regular file\n")
    (root / "empty_dir").mkdir()
    (root / "data_dir").mkdir()
    (root / "empty.jsonl").write_text("")
    (root / "no_question.txt").write_text("Solve the problem carefully.\n")
    (root / "config_only").mkdir()
    (root / "config_only" / "config.json").write_text(json.dumps({"model_type": "qwen3"}))
    return root


def _tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


def test_the_list_is_long_and_new():
    assert len(BAD_INPUTS) >= 20
    assert len({" ".join(args) for args, _ in BAD_INPUTS}) == len(BAD_INPUTS)


@pytest.mark.parametrize("args,needles", BAD_INPUTS,
                         ids=[" ".join(a).replace("{in}/", "") for a, _ in BAD_INPUTS])
def test_bad_input_exits_2_with_one_line_and_leaves_nothing(tmp_path, inputs, args, needles):
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    before = _tree(inputs)
    proc = cli(*[a.replace("{in}", str(inputs)) for a in args], cwd=cwd)
    line = one_line_exit_2(proc, *[n.replace("{in}", str(inputs)) for n in needles])
    assert line.startswith("rlexp: error: "), line
    assert os.listdir(cwd) == [], "left behind: " + ", ".join(_tree(cwd))
    assert _tree(inputs) == before  # nothing made next to (or under) the inputs either


@pytest.mark.parametrize("deleted", ["~recipe", "~model_rollout", "~hydra/job_logging"])
def test_deleting_a_group_that_fills_no_schema_node_still_runs(tmp_path, deleted):
    """~GROUP is refused only where the schema's defaults would stand in for the choice."""
    proc = cli(deleted, "run.dry_run=true", cwd=tmp_path)
    assert proc.returncode == 0 and "rlexp plan (dry run" in proc.stdout, proc.stderr[-2000:]
