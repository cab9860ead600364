"""Rewards: pure functions of (completion, reference answer) -> score in [0, 1].

A run's total reward is sum_i weight_i * score_i with weights from cfg.reward; each weighted
term is reported separately as train/reward/<name>. `tunix_reward_fns` adapts them to the
call Tunix's learner makes: fn(prompts, completions, answer=..., **kwargs) -> list[float].
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Callable, Sequence

from rlexp.config import RewardConfig
from rlexp.data.extract import extract_answer, parse_number
from rlexp.errors import UserError

Score = Callable[[str, str], float]

_ANSWER_ONLY = re.compile(r"\s*<answer>[^<]*</answer>\s*", re.DOTALL)
_REASONING_THEN_ANSWER = re.compile(
    r"\s*<reasoning>.*?</reasoning>\s*<answer>[^<]*</answer>\s*", re.DOTALL)


def format_exact(completion: str, answer: str, template: str = "answer") -> float:
    """1 when the completion is exactly the template's tags and nothing else, else 0."""
    pattern = _REASONING_THEN_ANSWER if template == "reasoning" else _ANSWER_ONLY
    return 1.0 if pattern.fullmatch(completion) else 0.0


def format_approx(completion: str, answer: str, template: str = "answer") -> float:
    """Fraction of the template's tags that occur exactly once (partial format credit)."""
    tags = ["<answer>", "</answer>"]
    if template == "reasoning":
        tags = ["<reasoning>", "</reasoning>", *tags]
    return sum(completion.count(t) == 1 for t in tags) / len(tags)


def answer_exact(completion: str, answer: str) -> float:
    """1 when the <answer> block holds the reference number (or the same string), else 0."""
    got = extract_answer(completion)
    if got is None:
        return 0.0
    if got == answer.strip():
        return 1.0
    a, b = parse_number(got), parse_number(answer)
    return 1.0 if a is not None and b is not None and abs(a - b) <= 1e-9 * max(1.0, abs(b)) else 0.0


def answer_close(completion: str, answer: str) -> float:
    """1 within 10% of the reference, 0.5 within 20%, else 0 (MaxText's ratio bands)."""
    got, ref = parse_number(extract_answer(completion)), parse_number(answer)
    if got is None or ref is None:
        return 0.0
    err = abs(got - ref)
    scale = abs(ref)
    if err <= 0.10 * scale or err == 0:
        return 1.0
    if err <= 0.20 * scale:
        return 0.5
    return 0.0


def math_verify(completion: str, answer: str) -> float:
    """1 when math-verify judges the <answer> block equivalent to the reference."""
    from math_verify import parse, verify  # optional extra, imported only when weighted

    got = extract_answer(completion)
    if got is None:
        return 0.0
    try:
        return 1.0 if verify(parse(answer), parse(got)) else 0.0
    except Exception:  # math-verify raises on unparsable input
        return 0.0


@dataclass(frozen=True)
class Term:
    # Name reported as train/reward/<name>.
    name: str
    # Score function (completion, answer) -> [0, 1].
    score: Score
    # Weight from cfg.reward.
    weight: float


def terms(cfg: RewardConfig, template: str) -> list[Term]:
    """The weighted reward terms of a run; zero-weight terms are dropped."""
    def fmt(fn):
        return lambda c, a: fn(c, a, template)

    candidates = [Term("format_exact", fmt(format_exact), cfg.format_exact),
                  Term("format_approx", fmt(format_approx), cfg.format_approx),
                  Term("answer_exact", answer_exact, cfg.answer_exact),
                  Term("answer_close", answer_close, cfg.answer_close),
                  Term("math_verify", math_verify, cfg.math_verify)]
    chosen = [t for t in candidates if t.weight != 0]
    if any(t.name == "math_verify" for t in chosen):
        try:
            import math_verify as _  # noqa: F401
        except ImportError:
            raise UserError("reward.math_verify: needs the math-verify package "
                            "(pip install 'rlexp[math]') or reward.math_verify=0") from None
    if not chosen:
        raise UserError("reward: every weight is 0; give at least one reward a non-zero weight")
    return chosen


def score_all(ts: Sequence[Term], completions: Sequence[str], answers: Sequence[str]
              ) -> dict[str, list[float]]:
    """Weighted score of every term for every completion: {name: [w * score, ...]}."""
    return {t.name: [t.weight * t.score(c, str(a)) for c, a in zip(completions, answers)]
            for t in ts}


def tunix_reward_fns(ts: Sequence[Term], record: Callable[[str, list[float]], None]
                     ) -> list[Callable[..., list[float]]]:
    """Adapters Tunix's learner calls; each also hands its values to `record(name, values)`."""
    def adapter(term: Term):
        def fn(prompts: list[str], completions: list[str], answer: Sequence[str], **_) -> list[float]:
            values = [term.weight * term.score(c, str(a)) for c, a in zip(completions, answer)]
            record(term.name, values)
            return values

        fn.__name__ = term.name  # Tunix logs rewards/<__name__>
        return fn

    return [adapter(t) for t in ts]
