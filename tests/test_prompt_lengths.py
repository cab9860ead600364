"""Prompts longer than rollout.max_prompt_length are counted at start (rlexp.data.lengths):
a few are one warning line, more than dataset.max_truncated_fraction an exit 2 naming a length
that fits 99% of them, before any MLflow run or checkpoint exists."""

from __future__ import annotations

import json
import sqlite3

import pytest
from hydra import compose, initialize_config_dir
from hydra.core.global_hydra import GlobalHydra

from rlexp.base.errors import UserError
from rlexp.config.convert import to_config
from rlexp.config.paths import conf_dir
from rlexp.config.schema import Config, DatasetConfig
from rlexp.config.validate import knobs
from rlexp.data import build_splits
from rlexp.data.lengths import PromptLengths, check_prompt_lengths, prompt_lengths
from rlexp.data.loaders import Problem, RawSplits
from helpers import cli, one_line_exit_2


@pytest.mark.parametrize("lengths,limit,want", [
    ([], 64, PromptLengths(0, 0, 0, 0)),
    ([10, 20, 30], 64, PromptLengths(3, 0, 30, 30)),
    ([10, 64, 65], 64, PromptLengths(3, 1, 65, 65)),  # 64 fits a limit of 64
    (list(range(1, 101)), 64, PromptLengths(100, 36, 100, 99)),  # 99 of 100 are <= 99
    (list(range(1, 201)), 300, PromptLengths(200, 0, 200, 198)),  # 198 of 200 are <= 198
    ([5] * 99 + [1000], 4, PromptLengths(100, 100, 1000, 5)),  # one outlier: 99% need 5
])
def test_prompt_lengths_count_the_longest_and_the_99th_percentile(lengths, limit, want):
    assert prompt_lengths(lengths, limit) == want
    assert prompt_lengths(list(reversed(lengths)), limit) == want  # order does not matter


def test_none_cut_is_silent():
    assert check_prompt_lengths([10, 64], 64, 0.05) is None
    assert check_prompt_lengths([], 64, 0.0) is None


def test_a_few_cut_is_one_warning_with_the_count_and_the_longest():
    lengths = [10] * 95 + [70, 80, 90, 100, 300]  # 5 of 100 = max_truncated_fraction
    warning = check_prompt_lengths(lengths, 64, 0.05)
    assert warning == ("5 of 100 prompts exceed rollout.max_prompt_length=64 "
                       "(longest 300 tokens); they are cut")


def test_more_cut_than_the_fraction_is_refused_naming_a_length_that_fits_99_percent():
    lengths = [10] * 94 + [70, 80, 90, 100, 110, 300]  # 6 of 100 > 5%
    with pytest.raises(UserError) as err:
        check_prompt_lengths(lengths, 64, 0.05)
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("rollout.max_prompt_length=64 is too short: 6 of 100 prompts")
    assert "longest 300 tokens" in message and "dataset.max_truncated_fraction=0.05" in message
    assert "set rollout.max_prompt_length=110 to fit 99% of them" in message


def test_fraction_zero_refuses_any_cut_and_one_allows_all():
    with pytest.raises(UserError, match="1 of 3 prompts"):
        check_prompt_lengths([1, 2, 65], 64, 0.0)
    assert check_prompt_lengths([65, 66, 67], 64, 1.0).startswith("3 of 3 prompts exceed")


def test_build_splits_records_every_prompt_length_before_the_cut():
    raw = RawSplits(train=[Problem("1+1", "2"), Problem("x" * 50, "1")],
                    eval=[Problem("2+2", "4")])
    encode = lambda text: [ord(c) for c in text]  # noqa: E731 (one token per character)
    decode = lambda ids: "".join(chr(i) for i in ids)  # noqa: E731
    s = build_splits(raw, "answer", encode, decode, 60)
    rendered = [len(e.prompt) for e in s.train + s.eval]
    assert s.truncated == 1 and rendered[1] == 60  # the long one is cut ...
    assert s.prompt_lengths[1] > 60  # ... but its length is the full one
    assert len(s.prompt_lengths) == 3 and s.prompt_lengths[0] == rendered[0]


def test_the_fraction_defaults_to_five_percent_and_must_lie_in_0_1(compose_config):
    assert DatasetConfig().max_truncated_fraction == 0.05
    ranges = {key: spec.range for key, _, spec, _ in knobs(Config())}
    assert ranges["dataset.max_truncated_fraction"] == "[0, 1]"
    assert compose_config("dataset.max_truncated_fraction=0").dataset.max_truncated_fraction == 0


def test_gsm8k_prompts_cut_to_64_tokens_exit_2_at_start(tmp_path):
    """The issue's case: every GSM8K prompt is longer than 64 char tokens. Found while the
    engine builds (it has the tokenizer), before the warm start, any MLflow run or checkpoint."""
    rows = [{"question": f"Natalia sold clips to {i} of her friends in April, and then she "
                         "sold half as many clips in May. How many clips did she sell?",
             "answer": f"{i} + {i // 2}\n#### {i + i // 2}"} for i in range(2, 60, 2)]
    data = tmp_path / "gsm8k.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    cwd = tmp_path / "cwd"
    cwd.mkdir()
    proc = cli("dataset=gsm8k", f"dataset.path={data}", "rollout.max_prompt_length=64",
               # room for the reasoning template's shortest answer (42 char tokens), so the
               # prompt length is the one thing wrong
               "rollout.max_completion_length=48",
               "dataset.num_eval=4", "eval.num_samples=4", "train.batch_size=8", cwd=cwd,
               timeout=300)
    line = one_line_exit_2(proc, "rollout.max_prompt_length=64 is too short",
                           "fit 99% of them", "dataset.max_truncated_fraction=0.05")
    assert line.startswith("rlexp: error: ")
    runs = cwd / "outputs" / "runs"
    assert not runs.exists() or not any(runs.iterdir())  # no run dir
    db = cwd / "outputs" / "mlflow.db"
    if db.exists():  # the store may have been opened ahead of the run, but holds no run
        with sqlite3.connect(db) as conn:
            assert conn.execute("SELECT COUNT(*) FROM runs").fetchone() == (0,)


def _config(*overrides: str) -> Config:
    GlobalHydra.instance().clear()
    try:
        with initialize_config_dir(str(conf_dir()), version_base="1.3"):
            return to_config(compose("config", overrides=list(overrides)))
    finally:
        GlobalHydra.instance().clear()


@pytest.mark.parametrize("overrides,want", [
    (["dataset=gsm8k", "rollout.max_prompt_length=320"], 320 + 24),  # tiny's completion: 24
    (["rollout.max_completion_length=40"], 64 + 40),
    (["recipe=none"], 256 + 768),
    (["rollout=vllm", "recipe=none"], 256 + 512),
    (["experiment=tunix_grpo_demo"], 1280),  # the demo's own value, with its 256 slack
    (["rollout.max_prompt_length=320", "rollout.kv_cache_size=400"], 400),
])
def test_kv_cache_size_is_the_two_lengths_unless_set(overrides, want):
    """Once refused until the user also set rollout.kv_cache_size=352: the lengths decide it."""
    assert _config(*overrides).rollout.kv_cache_size == want


def test_an_explicit_kv_cache_too_small_for_the_lengths_is_refused():
    with pytest.raises(UserError, match="rollout.kv_cache_size=300 is invalid: must be >= "):
        _config("rollout.max_prompt_length=320", "rollout.kv_cache_size=300")
