"""Reward sets that reproduce other frameworks' rewards, score for score (conf/reward/*.yaml).

`maxtext_*`: MaxText's GSM8K GRPO rewards (src/MaxText/rl/utils_rl.py at a4de80cc5; the same in
examples/grpo_llama3_1_*_demo*.py at fa273e9e1, grpo_llama3_demo.py at 28e5097ac), constants as
kwargs defaulting to that rl.yml. `maxtext_current_*`: at e591f30cb (src/maxtext/trainers/
post_train/rl/utils_rl.py): no check_answer, check_numbers by math_verify, other constants.
`easydel_*`: EasyDeL's GRPO tutorial (tutorials/post-training/group_relative_policy_optimization/
launch.py at e2e6dccc). tests/test_seed_rewards.py runs the sources' own functions on the same
completions. Signature: fn(prompts, completions, answers)."""

from __future__ import annotations

import functools
import re
from typing import Any, Sequence

from rlexp.data.rewards import math_verify_timeout

# MaxText rl.yml (a4de80cc5) "Reward" block.
MAXTEXT_CONSTANTS = {
    "reward_exact_format_match": 3.0, "reward_white_space_format_match": 1.5,
    "reward_partial_format_match": 0.5, "reward_ratio_guess_to_answer_high": 0.5,
    "reward_ratio_guess_to_answer_low": 0.25, "penalty_incorrect_format": -0.5,
    "penalty_incorrect_answer": -1.0,
}

# EasyDeL launch.py (e2e6dccc) SYSTEM_PROMPT: the prompt the format reward is written for.
EASYDEL_SYSTEM_PROMPT = (
    "A conversation between User and Assistant. The user asks a question, and the Assistant solves "
    "it. The assistant first thinks about the think process in the mind and then provides the user "
    "with the answer. The think process and answer are enclosed within <think> </think> and answer "
    "needs no tag tags, respectively, i.e., <think> think process here </think> answer here")


def _tags(reasoning_tag: str) -> tuple[str, str, str, str]:
    return f"<{reasoning_tag}>", f"</{reasoning_tag}>", "<answer>", "</answer>"


def maxtext_format_regex(reasoning_tag: str = "reasoning") -> re.Pattern:
    """utils_rl.get_match_format_regex: reasoning, anything, answer, by re.search with MULTILINE."""
    rs, re_, ss, se = (re.escape(t) for t in _tags(reasoning_tag))
    return re.compile(rf"^[\s]{{0,}}{rs}.+?{re_}.*?{ss}(.+?){se}[\s]{{0,}}$",
                      flags=re.MULTILINE | re.DOTALL)


# utils_rl.get_match_numbers_regex: the first run of digits and dots after <answer>.
MAXTEXT_NUMBER = re.compile(r"<answer>.*?([\d\.]{1,})", flags=re.MULTILINE | re.DOTALL)


def _const(kwargs: dict[str, Any], name: str) -> float:
    return float(kwargs.get(name, MAXTEXT_CONSTANTS[name]))


def maxtext_format_exact(prompts: Sequence[str], completions: Sequence[str], answers: Sequence[str],
                         reasoning_tag: str = "reasoning", **kwargs: Any) -> list[float]:
    """utils_rl.match_format_exactly: reward_exact_format_match when the format regex is found."""
    pattern = maxtext_format_regex(reasoning_tag)
    hit = _const(kwargs, "reward_exact_format_match")
    return [hit if pattern.search(c) is not None else 0.0 for c in completions]


def maxtext_format_approx(prompts: Sequence[str], completions: Sequence[str],
                          answers: Sequence[str], reasoning_tag: str = "reasoning",
                          **kwargs: Any) -> list[float]:
    """utils_rl.match_format_approximately: per tag seen once +reward_partial_format_match."""
    good = _const(kwargs, "reward_partial_format_match")
    bad = _const(kwargs, "penalty_incorrect_format")
    tags = _tags(reasoning_tag)
    return [sum(good if c.count(t) == 1 else bad for t in tags) for c in completions]


def maxtext_check_answer(prompts: Sequence[str], completions: Sequence[str], answers: Sequence[str],
                         reasoning_tag: str = "reasoning", **kwargs: Any) -> list[float]:
    """utils_rl.check_answer of a well-formatted completion: equal string, equal after strip, ratio
    within 10% or 20%, else a penalty (penalty_incorrect_format for a non-number); 0 unformatted."""
    pattern = maxtext_format_regex(reasoning_tag)
    return [0.0 if (m := pattern.search(c)) is None else _const(kwargs, _band(m.group(1), ref))
            for c, ref in zip(completions, answers)]


def _band(guess: str, ref: str) -> str:
    """The MAXTEXT_CONSTANTS name check_answer gives `guess`."""
    if guess == ref:
        return "reward_exact_format_match"
    if guess.strip() == ref.strip():
        return "reward_white_space_format_match"
    try:
        ratio = float(guess) / float(ref)
    except (ValueError, ZeroDivisionError, OverflowError):
        return "penalty_incorrect_format"
    if 0.9 <= ratio <= 1.1:
        return "reward_ratio_guess_to_answer_high"
    if 0.8 <= ratio <= 1.2:
        return "reward_ratio_guess_to_answer_low"
    return "penalty_incorrect_answer"


def maxtext_first_number(completion: str) -> str | None:
    """The first run of digits and dots after the first <answer> (MaxText's number)."""
    m = MAXTEXT_NUMBER.search(completion)
    return m.group(1) if m is not None else None


def maxtext_check_numbers(prompts: Sequence[str], completions: Sequence[str],
                          answers: Sequence[str], correct: float = 1.5, **_: Any) -> list[float]:
    """utils_rl.check_numbers: 1.5 (MaxText's literal) when the first number after <answer>
    equals the reference as floats, else 0."""
    def score(guess: str | None, ref: str) -> float:
        try:
            return correct if guess is not None and float(guess) == float(ref) else 0.0
        except (ValueError, OverflowError):
            return 0.0
    return [score(maxtext_first_number(c), ref) for c, ref in zip(completions, answers)]


# rl.yml (src/maxtext/configs/post_train/rl.yml at e591f30cb, lines 190-198) "Reward" block.
# The ratio rewards are still in rl.yml but no function reads them any more.
MAXTEXT_CURRENT_CONSTANTS = {
    "reward_exact_answer": 1.0, "reward_white_space_format_match": 1.0,
    "reward_exact_format_match": 0.1, "reward_partial_format_match": 0.0,
    "penalty_incorrect_format": 0.0, "penalty_incorrect_answer": 0.0,
}


def _current(kwargs: dict[str, Any], name: str) -> float:
    return float(kwargs.get(name, MAXTEXT_CURRENT_CONSTANTS[name]))


def maxtext_current_format_regex(reasoning_tag: str = "reasoning",
                                 reasoning_start_in_prompt: bool = False) -> re.Pattern:
    """utils_rl.get_match_format_regex (e591f30cb): reasoning, anything, answer, found anywhere (no
    ^...$); without the opening tag when the prompt holds it (reasoning_start_token_in_prompt)."""
    rs, re_, ss, se = (re.escape(t) for t in _tags(reasoning_tag))
    rs = "" if reasoning_start_in_prompt else rs
    return re.compile(rf"{rs}.*?{re_}.*?{ss}(.+?){se}", flags=re.MULTILINE | re.DOTALL)


def maxtext_current_format_exact(prompts: Sequence[str], completions: Sequence[str],
                                 answers: Sequence[str], reasoning_tag: str = "reasoning",
                                 reasoning_start_in_prompt: bool = False,
                                 **kwargs: Any) -> list[float]:
    """utils_rl.match_format_exactly (e591f30cb): reward_exact_format_match if the regex matches."""
    pattern = maxtext_current_format_regex(reasoning_tag, reasoning_start_in_prompt)
    hit = _current(kwargs, "reward_exact_format_match")
    return [hit if pattern.search(c) is not None else 0.0 for c in completions]


def maxtext_current_format_approx(prompts: Sequence[str], completions: Sequence[str],
                                  answers: Sequence[str], reasoning_tag: str = "reasoning",
                                  reasoning_start_in_prompt: bool = False,
                                  **kwargs: Any) -> list[float]:
    """utils_rl.match_format_approximately (e591f30cb): per tag seen once
    reward_partial_format_match, else penalty_incorrect_format (the opening reasoning tag counts
    once when the prompt holds it). 0 with rl.yml's constants."""
    good = _current(kwargs, "reward_partial_format_match")
    bad = _current(kwargs, "penalty_incorrect_format")
    rs, *rest = _tags(reasoning_tag)
    return [(good if reasoning_start_in_prompt or c.count(rs) == 1 else bad)
            + sum(good if c.count(t) == 1 else bad for t in rest) for c in completions]


def maxtext_current_check_numbers(prompts: Sequence[str], completions: Sequence[str],
                                  answers: Sequence[str], **kwargs: Any) -> list[float]:
    """utils_rl.check_numbers (e591f30cb) on `maxtext_grading.extract_answer`'s answer; the
    reference is one GSM8K answer (MaxText's [a, a] list for GSM8K, deduplicated)."""
    from rlexp.data import maxtext_grading as g
    exact = _current(kwargs, "reward_exact_answer")

    def score(guess: str, ref: str) -> float:
        if guess == g.FALLBACK_ANSWER:  # no answer block and no \boxed{}
            return _current(kwargs, "penalty_incorrect_answer")
        floor = _current(kwargs, "penalty_incorrect_format")
        if guess == ref:
            return max(floor, exact)
        if guess.strip() == ref.strip():
            return max(floor, _current(kwargs, "reward_white_space_format_match"))
        if g.verify([g.boxed(g.preprocess_math_string(ref))],
                    [g.boxed(g.preprocess_math_string(guess))]) > 0.0:
            return max(floor, exact)
        return floor
    return [score(g.extract_answer(c), ref) for c, ref in zip(completions, answers)]


_THINK_FIRST = re.compile(r"^<think>.*?</think>", re.DOTALL)


def easydel_format(prompts: Sequence[str], completions: Sequence[str], answers: Sequence[str],
                   **_: Any) -> list[float]:
    """launch.py format_reward: 1 when the completion starts with a <think>...</think> block
    (re.match; whatever follows is not checked), else 0."""
    return [1.0 if _THINK_FIRST.match(c) else 0.0 for c in completions]


def easydel_accuracy(prompts: Sequence[str], completions: Sequence[str], answers: Sequence[str],
                     **_: Any) -> list[float]:
    """launch.py accuracy_reward: math_verify's first LaTeX expression of the completion against
    the gold's first; 1 when the gold has none (the tutorial scores such rows)."""
    from math_verify import LatexExtractionConfig, parse, verify  # optional extra
    t = math_verify_timeout()
    first = functools.partial(parse, extraction_mode="first_match",
                              extraction_config=[LatexExtractionConfig()], parsing_timeout=t)
    scores = []
    for content, solution in zip(completions, answers):
        gold, got = first(solution), first(content)
        if len(gold) != 0:
            try:
                scores.append(float(verify(got, gold, timeout_seconds=t)))
            except Exception:  # as the tutorial: a failed verification scores 0
                scores.append(0.0)
        else:
            scores.append(1.0)
    return scores
