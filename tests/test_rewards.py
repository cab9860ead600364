"""Rewards on crafted completions: each reward function's verdict, by hand."""

from __future__ import annotations

import pytest

from rlexp.data import rewards
from rlexp.config.schema import RewardConfig, RewardFunctionConfig
from rlexp.data.extract import extract_answer, gsm8k_final_answer, parse_number
from rlexp.base.errors import UserError

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


def entry(target: str, weight: float = 1.0, name: str | None = None, **kwargs) -> RewardFunctionConfig:
    return RewardFunctionConfig(target, weight, name, kwargs)


def test_weights_scale_and_zero_weights_drop_terms():
    cfg = RewardConfig([entry("rlexp.rewards.format_exact_reward", 0.5, "format_exact"),
                        entry("rlexp.rewards.format_approx_reward", 0.0),
                        entry("rlexp.rewards.answer_exact_reward", 2.0)])
    terms = rewards.terms(cfg, "answer")
    assert [t.name for t in terms] == ["format_exact", "answer_exact_reward"]
    scored = rewards.score_all(terms, [RIGHT, "<answer>7</answer>", ""], ["42", "42", "42"])
    assert scored == {"format_exact": [0.5, 0.5, 0.0], "answer_exact_reward": [2.0, 0.0, 0.0]}


def test_default_list_is_the_four_builtins_with_their_weights():
    terms = rewards.terms(RewardConfig(), "answer")
    assert [(t.name, t.weight) for t in terms] == [
        ("format_exact", 0.5), ("format_approx", 0.25), ("answer_exact", 1.0), ("answer_close", 0.5)]


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
    with pytest.raises(UserError, match="no function with a non-zero weight"):
        rewards.terms(RewardConfig([entry("rlexp.rewards.answer_exact_reward", 0.0)]), "answer")
    try:
        import math_verify  # noqa: F401
    except ImportError:
        with pytest.raises(UserError, match="math-verify"):
            rewards.terms(RewardConfig([entry("rlexp.rewards.math_verify_reward")]), "answer")


# A user's package: written to a temp dir that goes on sys.path, as PYTHONPATH would put it.
USER_MODULE = """
def length_bonus(prompts, completions, answers, scale=1.0, **kwargs):
    return [scale * min(len(c), 10) / 10 for c in completions]

def scalar(prompts, completions, answers, **kwargs):
    return 1.0

def one_short(prompts, completions, answers, **kwargs):
    return [0.0] * (len(completions) - 1)

def broken(prompts, completions, answers, **kwargs):
    raise KeyError("solution")

not_a_function = 3
"""


@pytest.fixture
def user_pkg(tmp_path, monkeypatch):
    pkg = tmp_path / "myrewards_e12"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "fns.py").write_text(USER_MODULE)
    (pkg / "bad_import.py").write_text("import no_such_dependency_xyz\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    return "myrewards_e12"


def test_user_function_with_kwargs_weight_and_name(user_pkg):
    cfg = RewardConfig([entry(f"{user_pkg}.fns.length_bonus", 2.0, "brevity", scale=0.5)])
    (term,) = rewards.terms(cfg, "answer")
    assert term.name == "brevity"
    # len 5 -> 0.5 * 5/10 = 0.25, weighted x2 = 0.5; len 20 capped at 10 -> 0.5 -> 1.0
    assert term(["p", "p"], ["abcde", "x" * 20], ["1", "2"]) == [0.5, 1.0]
    (unnamed,) = rewards.terms(RewardConfig([entry(f"{user_pkg}.fns.length_bonus")]), "answer")
    assert unnamed.name == "length_bonus"


@pytest.mark.parametrize("target, message", [
    ("no_such_pkg_e12.fns.f", "no module 'no_such_pkg_e12'"),
    ("{pkg}.fns.missing", "has no submodule or attribute 'missing'"),
    ("{pkg}.bad_import.f", "importing '{pkg}.bad_import' failed (ModuleNotFoundError"),
    ("{pkg}.fns.not_a_function", "not callable"),
    ("{pkg}.fns.scalar", "must return one float per completion"),
    ("{pkg}.fns.one_short", "returned 2 values for 3 completions"),
    ("{pkg}.fns.broken", "raised KeyError"),
    ("nodots", "not a dotted path"),
])
def test_bad_targets_are_one_line_user_errors(user_pkg, target, message):
    cfg = RewardConfig([entry(target.format(pkg=user_pkg))])
    with pytest.raises(UserError) as info:
        rewards.terms(cfg, "answer")
    assert message.format(pkg=user_pkg) in str(info.value)
    assert "\n" not in str(info.value)


def test_duplicate_names_are_rejected():
    cfg = RewardConfig([entry("rlexp.rewards.answer_exact_reward"),
                        entry("rlexp.rewards.answer_exact_reward")])
    with pytest.raises(UserError, match="two reward functions have this name"):
        rewards.terms(cfg, "answer")


def test_reasoning_tag_reaches_format_rewards():
    cfg = RewardConfig([entry("rlexp.rewards.format_exact_reward", 1.0, "fmt")])
    (term,) = rewards.terms(cfg, "reasoning", reasoning_tag="think")
    assert term(["p"] * 2, ["<think>2+2</think><answer>4</answer>",
                            "<reasoning>2+2</reasoning><answer>4</answer>"], ["4", "4"]) == [1.0, 0.0]


def test_overlong_penalty_by_hand():
    # budget 10, buffer 4: no penalty up to 6 tokens, then -(n-6)/4, and -1 at 10 and beyond.
    got = rewards.overlong_penalty([], [], [], completion_lengths=[3, 6, 7, 8, 10, 12],
                                   max_length=10, buffer=4)
    assert got == [0.0, 0.0, -0.25, -0.5, -1.0, -1.0]


def test_overlong_term_counts_tokens_with_the_run_tokenizer():
    from rlexp.config.schema import Config

    cfg = Config()
    cfg.algo.overlong_buffer, cfg.algo.overlong_penalty = 0.5, 2.0
    cfg.rollout.max_completion_length = 8
    terms = rewards.for_run(cfg)
    assert terms[-1].name == "overlong" and terms[-1].kwargs == {"max_length": 8, "buffer": 4}
    # words as tokens: 6 words -> (4 - 6) / 4 = -0.5, weighted x2 = -1.0
    counted = rewards.with_token_counter(terms, lambda text: len(text.split()))
    assert counted[-1](["p"], ["a b c d e f"], ["1"]) == [-1.0]


def test_extraction_helpers():
    assert extract_answer("a <answer> 3 </answer> b <answer>4</answer>") == "4"
    assert extract_answer("no tags") is None
    assert parse_number("$1,200.50 dollars") == 1200.5
    assert parse_number("none") is None
    assert gsm8k_final_answer("3 + 4 = <<3+4=7>>7\n#### 7") == "7"
    assert gsm8k_final_answer("#### 1,000") == "1000"
    assert gsm8k_final_answer("no marker 5") is None


# (answer in the completion, reference, same answer?): compared as mathematics, not by the last
# number (which scored \frac{3}{2} against \frac{1}{2}, and \sqrt{2} against 2, as right).
MATH_TABLE = [
    ("\\frac{3}{2}", "\\frac{1}{2}", 0.0),      # fractions
    ("\\frac{1}{2}", "\\frac{1}{2}", 1.0),
    ("\\dfrac{2}{4}", "\\frac{1}{2}", 1.0),
    ("0.5", "\\frac{1}{2}", 1.0),
    ("1/2", "\\frac{1}{2}", 1.0),
    ("3/2", "1.5", 1.0),
    ("\\sqrt{2}", "2", 0.0),                    # roots
    ("\\sqrt{4}", "2", 1.0),
    ("2\\sqrt{2}", "\\sqrt{8}", 1.0),
    ("\\sqrt{3}", "\\sqrt{2}", 0.0),
    ("(1,2]", "(1,2]", 1.0),                    # intervals
    ("[1,2]", "(1,2]", 0.0),
    ("(1, 2]", "(1,2]", 1.0),
    ("50\\%", "50", 1.0),                       # percent: the number counts
    ("50%", "50", 1.0),
    ("50\\%", "0.5", 0.0),
    ("5\\text{ cm}", "5", 1.0),                 # units
    ("5 cm", "5", 1.0),
    ("18 dollars", "18", 1.0),
    ("$18", "18", 1.0),
    ("6 cm", "5", 0.0),
    ("1 2", "2", 0.0),                          # two numbers are not the last one
    ("1,000", "1000", 1.0),
    ("10^{3}", "1000", 1.0),
    ("x = 3", "3", 1.0),
    ("\\{1, 2\\}", "\\{2, 1\\}", 1.0),
    ("\\pi", "3.14159", 0.0),
]


@pytest.mark.parametrize("got,ref,same", MATH_TABLE)
def test_answers_compared_as_mathematics(got, ref, same):
    from conftest import require
    import importlib.util

    plain = rewards.plain_number(got) is not None and rewards.plain_number(ref) is not None
    if not plain:
        require(importlib.util.find_spec("math_verify") is not None,
                "math-verify is not installed", "bash scripts/setup")
    assert rewards.answer_exact(f"<answer>{got}</answer>", ref) == same
