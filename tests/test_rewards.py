"""Rewards on crafted completions: each reward function's verdict, by hand."""

from __future__ import annotations

import pytest

from rlexp import rewards
from rlexp.config import RewardConfig
from rlexp.data.extract import extract_answer, gsm8k_final_answer, parse_number
from rlexp.errors import UserError

RIGHT = "<answer>42</answer>"
CASES = {
    # name: (completion, reference, format_exact, format_approx, answer_exact, answer_close)
    "right": (RIGHT, "42", 1.0, 1.0, 1.0, 1.0),
    "right answer, wrong format": ("The answer is 42", "42", 0.0, 0.0, 0.0, 0.0),
    "right answer, extra text": ("so <answer>42</answer> done", "42", 0.0, 1.0, 1.0, 1.0),
    "right format, wrong answer": ("<answer>7</answer>", "42", 1.0, 1.0, 0.0, 0.0),
    "near miss within 10%": ("<answer>40</answer>", "42", 1.0, 1.0, 0.0, 1.0),
    "near miss within 20%": ("<answer>35</answer>", "42", 1.0, 1.0, 0.0, 0.5),
    "garbage": ("<ans<<wer>>4", "42", 0.0, 0.0, 0.0, 0.0),
    "empty": ("", "42", 0.0, 0.0, 0.0, 0.0),
    "unclosed tag": ("<answer>42", "42", 0.0, 0.5, 0.0, 0.0),
    "duplicated tags": ("<answer>1</answer><answer>42</answer>", "42", 0.0, 0.0, 1.0, 1.0),
    "number formats": ("<answer> 1,234.0 </answer>", "1234", 1.0, 1.0, 1.0, 1.0),
    "negative": ("<answer>-3</answer>", "-3", 1.0, 1.0, 1.0, 1.0),
    "zero reference": ("<answer>1</answer>", "0", 1.0, 1.0, 0.0, 0.0),
}


@pytest.mark.parametrize("name", list(CASES))
def test_reward_functions(name):
    completion, ref, fmt, approx, exact, close = CASES[name]
    assert rewards.format_exact(completion, ref) == fmt
    assert rewards.format_approx(completion, ref) == approx
    assert rewards.answer_exact(completion, ref) == exact
    assert rewards.answer_close(completion, ref) == close


def test_reasoning_template_format():
    good = "<reasoning>6 * 7 = 42</reasoning>\n<answer>42</answer>"
    assert rewards.format_exact(good, "42", "reasoning") == 1.0
    assert rewards.format_exact(RIGHT, "42", "reasoning") == 0.0  # reasoning block missing
    assert rewards.format_approx(RIGHT, "42", "reasoning") == 0.5  # 2 of 4 tags
    assert rewards.format_approx(good, "42", "reasoning") == 1.0


def test_weights_scale_and_zero_weights_drop_terms():
    cfg = RewardConfig(format_exact=0.5, format_approx=0.0, answer_exact=2.0, answer_close=0.0)
    terms = rewards.terms(cfg, "answer")
    assert [t.name for t in terms] == ["format_exact", "answer_exact"]
    scored = rewards.score_all(terms, [RIGHT, "<answer>7</answer>", ""], ["42", "42", "42"])
    assert scored == {"format_exact": [0.5, 0.5, 0.0], "answer_exact": [2.0, 0.0, 0.0]}


def test_tunix_adapters_record_each_term():
    seen = {}
    fns = rewards.tunix_reward_fns(rewards.terms(RewardConfig(), "answer"),
                                   lambda name, v: seen.setdefault(name, v))
    assert [f.__name__ for f in fns] == ["format_exact", "format_approx", "answer_exact", "answer_close"]
    values = [f(prompts=["p", "p"], completions=[RIGHT, "x"], answer=["42", "42"], mode="train")
              for f in fns]
    assert values == [[0.5, 0.0], [0.25, 0.0], [1.0, 0.0], [0.5, 0.0]]
    assert seen["answer_exact"] == [1.0, 0.0]


def test_all_zero_weights_and_missing_math_verify_are_user_errors():
    with pytest.raises(UserError, match="every weight is 0"):
        rewards.terms(RewardConfig(0, 0, 0, 0, 0), "answer")
    try:
        import math_verify  # noqa: F401
    except ImportError:
        with pytest.raises(UserError, match="reward.math_verify"):
            rewards.terms(RewardConfig(math_verify=1.0), "answer")


def test_extraction_helpers():
    assert extract_answer("a <answer> 3 </answer> b <answer>4</answer>") == "4"
    assert extract_answer("no tags") is None
    assert parse_number("$1,200.50 dollars") == 1200.5
    assert parse_number("none") is None
    assert gsm8k_final_answer("3 + 4 = <<3+4=7>>7\n#### 7") == "7"
    assert gsm8k_final_answer("#### 1,000") == "1000"
    assert gsm8k_final_answer("no marker 5") is None
