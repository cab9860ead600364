"""Rewards as plug-ins: `reward.functions` lists `{_target_, weight, name, kwargs}` entries. A
reward function is fn(prompts, completions, answers, **kwargs) -> one float per completion (TRL's
reward_funcs); the reward is sum_i weight_i * fn_i, each term logged as train/reward/<name>.
`terms()` resolves and probes them before anything runs."""

from __future__ import annotations

import dataclasses
import importlib.util
import inspect
import logging
import math
import re
import threading
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Sequence

from rlexp.base.errors import UserError
from rlexp.base.plugins import first_line as _first_line, resolve
from rlexp.config.schema import RewardConfig
from rlexp.data.extract import extract_answer, plain_number

if TYPE_CHECKING:
    from rlexp.config.schema import Config

def format_exact(completion: str, answer: str, template: str = "answer",
                 reasoning_tag: str = "reasoning") -> float:
    """1 when the completion is exactly the template's tags and nothing else, else 0."""
    t = re.escape(reasoning_tag)
    reasoning = rf"\s*<{t}>.*?</{t}>" if template == "reasoning" else ""
    pattern = rf"{reasoning}\s*<answer>[^<]*</answer>\s*"
    return 1.0 if re.fullmatch(pattern, completion, re.DOTALL) else 0.0


def format_approx(completion: str, answer: str, template: str = "answer",
                  reasoning_tag: str = "reasoning") -> float:
    """Fraction of the template's tags that occur exactly once (partial format credit)."""
    tags = ["<answer>", "</answer>"]
    if template == "reasoning":
        tags = [f"<{reasoning_tag}>", f"</{reasoning_tag}>", *tags]
    return sum(completion.count(t) == 1 for t in tags) / len(tags)


def _no_timeout_notice(record: logging.LogRecord) -> bool:
    """Drops math-verify's notice that its timeout is off (deliberate off the main thread)."""
    return "Timeout is disabled" not in record.getMessage()


def math_verify_timeout() -> int | None:
    """math-verify's parse/verify timeout: 5 s on the main thread; None (off) elsewhere: it is a
    SIGALRM, which only the main thread may set (the learner may call rewards off it)."""
    if threading.current_thread() is threading.main_thread():
        return 5
    for name in ("math_verify.parser", "math_verify.grader"):
        logging.getLogger(name).addFilter(_no_timeout_notice)  # a no-op when already there
    return None


# Signs that a non-number answer is written as mathematics (LaTeX or an expression).
_MATHS = re.compile(r"[\\^/=*{}()\[\]+]|\d\s*-|sqrt|pi")


def _verify(got: str, ref: str) -> bool | None:
    """math-verify's verdict on two answers written as LaTeX or plain expressions (each parsed
    as the content of a \\boxed{}); None when math-verify is not installed."""
    try:
        from math_verify import parse, verify  # optional extra, imported only when needed
    except ImportError:
        return None
    t = math_verify_timeout()

    def parsed(text: str) -> list:
        return parse(text if "\\boxed" in text or "$" in text else f"\\boxed{{{text}}}",
                     parsing_timeout=t)
    try:
        return bool(verify(parsed(ref), parsed(got), timeout_seconds=t))
    except Exception:  # math-verify raises on some unparsable input
        return False


def same_answer(got: str, ref: str) -> bool:
    """`got` is the reference answer: the same text; the same plain number ("1,234", "$18", "50%",
    "5 cm": only the number counts); else the same mathematics by math-verify's parse/verify
    (fractions, roots, intervals, sets, LaTeX units), or the same text up to spaces without it."""
    got, ref = got.strip(), ref.strip()
    if got == ref:
        return True
    a, b = plain_number(got), plain_number(ref)
    if a is not None and b is not None:
        return abs(a - b) <= 1e-9 * max(1.0, abs(b))
    if (a is None) != (b is None) and not (_MATHS.search(got) or _MATHS.search(ref)):
        # A number against plain words ("12 13", "many"): not equal, and no sympy call
        # (math-verify takes ~15 ms on free text, per completion).
        return False
    verdict = _verify(got, ref)
    return "".join(got.split()) == "".join(ref.split()) if verdict is None else verdict


def answer_exact(completion: str, answer: str, **_: object) -> float:
    """1 when the last <answer> block is the reference answer (see `same_answer`), else 0."""
    got = extract_answer(completion)
    return 1.0 if got is not None and same_answer(got, answer) else 0.0


def answer_close(completion: str, answer: str, **_: object) -> float:
    """1 within 10% of the reference, 0.5 within 20%, else 0 (MaxText's ratio bands); for
    answers that are not plain numbers, 1 when `answer_exact` holds."""
    got = extract_answer(completion)
    if got is None:
        return 0.0
    a, ref = plain_number(got), plain_number(answer)
    if a is None or ref is None:
        return 1.0 if same_answer(got, answer) else 0.0
    err = abs(a - ref)
    return 1.0 if err <= 0.10 * abs(ref) else 0.5 if err <= 0.20 * abs(ref) else 0.0


def math_verify(completion: str, answer: str, **_: object) -> float:
    """1 when math-verify judges the <answer> block equivalent to the reference."""
    from math_verify import parse, verify  # optional extra, imported only when weighted
    got = extract_answer(completion)
    if got is None:
        return 0.0
    try:
        return 1.0 if verify(parse(answer), parse(got)) else 0.0
    except Exception:  # math-verify raises on unparsable input
        return 0.0


def _batched(score: Callable[..., float], name: str) -> Callable[..., list[float]]:
    def fn(prompts: Sequence[str], completions: Sequence[str], answers: Sequence[str],
           **kwargs: Any) -> list[float]:
        return [score(c, str(a), **kwargs) for c, a in zip(completions, answers)]
    fn.__name__ = fn.__qualname__ = name
    fn.__doc__ = score.__doc__
    return fn


format_exact_reward = _batched(format_exact, "format_exact_reward")
format_approx_reward = _batched(format_approx, "format_approx_reward")
answer_exact_reward = _batched(answer_exact, "answer_exact_reward")
answer_close_reward = _batched(answer_close, "answer_close_reward")
math_verify_reward = _batched(math_verify, "math_verify_reward")


def overlong_penalty(prompts: Sequence[str], completions: Sequence[str], answers: Sequence[str],
                     completion_lengths: Sequence[int], max_length: int, buffer: int,
                     **_: Any) -> list[float]:
    """DAPO's soft overlong punishment (Yu et al. 2025, arXiv:2503.14476, eq. 13), in tokens:
    0 up to max_length - buffer, then falling linearly to -1 at max_length (and -1 beyond)."""
    start = max_length - buffer
    return [0.0 if n <= start else max(-1.0, (start - n) / buffer) for n in completion_lengths]


# Targets that cannot run without math-verify (checked before anything runs).
NEEDS_MATH_VERIFY = (f"{__name__}.math_verify_reward", "rlexp.rewards.math_verify_reward",
                     "rlexp.data.reward_sets.easydel_accuracy",
                     "rlexp.data.reward_sets.maxtext_current_check_numbers")


class RewardFailed(Exception):
    """A reward plug-in raised after its start-up probe (the original is the __cause__)."""


@dataclass(frozen=True)
class Term:
    name: str  # reported as train/reward/<name>
    fn: Callable[..., Sequence[float]]  # fn(prompts, completions, answers, **kwargs) -> floats
    weight: float  # the reward.functions entry's
    kwargs: dict[str, Any] = field(default_factory=dict)  # the entry's, passed on every call
    # The run's prompt format (template, reasoning_tag), passed too; entry kwargs win.
    context: dict[str, Any] = field(default_factory=dict)
    # A completion's token count for `completion_lengths` (the engine sets the tokenizer's).
    count_tokens: Callable[[str], int] = len

    @property
    def needs_lengths(self) -> bool:
        """The function takes completion token counts (overlong shaping)."""
        try:
            return "completion_lengths" in inspect.signature(self.fn).parameters
        except (TypeError, ValueError):
            return False

    def __call__(self, prompts: Sequence[str], completions: Sequence[str],
                 answers: Sequence[Any], **extra: Any) -> list[float]:
        """Weighted values, one per completion (shape checked by `probe`)."""
        if self.needs_lengths and "completion_lengths" not in extra:
            extra = {**extra, "completion_lengths": [self.count_tokens(c) for c in completions]}
        try:
            out = self.fn(list(prompts), list(completions), [str(a) for a in answers],
                          **{**self.context, **extra, **self.kwargs})
            return [self.weight * float(v) for v in out]
        except Exception as exc:  # the plug-in's own failure, named (the probe passed)
            raise RewardFailed(f"reward {self.name} raised {type(exc).__name__}: "
                               f"{_first_line(exc)}") from exc


def terms(cfg: RewardConfig, template: str = "answer", reasoning_tag: str = "reasoning",
          probed: bool = True) -> list[Term]:
    """The weighted reward terms, resolved and probed (unless pre-flight did); zero weights
    dropped. Every function also gets template= and reasoning_tag=."""
    context = {"template": template, "reasoning_tag": reasoning_tag}
    chosen: list[Term] = []
    for i, entry in enumerate(cfg.functions):
        key = f"reward.functions[{i}]"
        if not math.isfinite(entry.weight):
            raise UserError(f"{key}.weight={entry.weight!r} is invalid: must be finite")
        if entry.weight == 0:
            continue
        if entry._target_ in NEEDS_MATH_VERIFY and importlib.util.find_spec("math_verify") is None:
            fname = entry._target_.rsplit(".", 1)[-1]
            raise UserError(f"{key}: {fname} needs the math-verify package "
                            "(pip install 'rlexp[math]'), or weight 0")
        fn = resolve(entry._target_, f"{key}._target_")
        name = entry.name or getattr(fn, "__name__", entry._target_.rsplit(".", 1)[-1])
        if any(t.name == name for t in chosen):
            raise UserError(f"{key}.name={name!r}: two reward functions have this name; give "
                            f"one a distinct `name` (logged as train/reward/<name>)")
        chosen.append(Term(name, fn, float(entry.weight), dict(entry.kwargs), context))
    if not chosen:
        raise UserError("reward.functions: no function with a non-zero weight; give at least "
                        "one entry a non-zero weight")
    for t in chosen if probed else ():
        probe(t)
    return chosen


def for_run(cfg: Config, probed: bool = True) -> list[Term]:
    """The run's terms: reward.functions, plus DAPO's overlong shaping when algo asks for it."""
    ts = terms(cfg.reward, cfg.dataset.template, cfg.dataset.reasoning_tag, probed)
    a = cfg.algo
    if a.overlong_buffer > 0 and a.overlong_penalty > 0:
        budget = cfg.rollout.max_completion_length
        ts.append(Term("overlong", overlong_penalty, a.overlong_penalty,
                       {"max_length": budget, "buffer": max(1, round(a.overlong_buffer * budget))}))
    return ts


# One example per shape a reward must cope with: a right, a wrong and an empty completion.
PROBE_PROMPTS = ["What is 2 + 3?", "What is 4 + 4?", "What is 1 + 0?"]
PROBE_COMPLETIONS = ["<answer>5</answer>", "<answer>7</answer>", ""]
PROBE_ANSWERS = ["5", "8", "1"]


def probe(term: Term) -> None:
    """Call the function once on three examples: it must return 3 finite numbers."""
    key = f"reward.functions (name={term.name})"
    extra = {"completion_lengths": list(map(len, PROBE_COMPLETIONS))} if term.needs_lengths else {}
    try:
        out = term.fn(list(PROBE_PROMPTS), list(PROBE_COMPLETIONS), list(PROBE_ANSWERS),
                      **{**term.context, **extra, **term.kwargs})
    except Exception as exc:
        raise UserError(f"{key}: calling it on 3 example completions raised "
                        f"{type(exc).__name__}: {_first_line(exc)}") from None
    try:
        values = [float(v) for v in out]
    except (TypeError, ValueError):
        raise UserError(f"{key}: must return one float per completion (a list of 3 here), "
                        f"got {type(out).__name__} {str(out)[:60]!r}") from None
    if len(values) != len(PROBE_COMPLETIONS):
        raise UserError(f"{key}: returned {len(values)} values for {len(PROBE_COMPLETIONS)} "
                        f"completions; it must return one float per completion")
    if not all(math.isfinite(v) for v in values):
        raise UserError(f"{key}: returned a non-finite value {values}")


def score_all(ts: Sequence[Term], completions: Sequence[str], answers: Sequence[str],
              prompts: Sequence[str] | None = None) -> dict[str, list[float]]:
    """Weighted score of every term for every completion: {name: [w * score, ...]}."""
    prompts = list(prompts) if prompts is not None else [""] * len(completions)
    return {t.name: t(prompts, completions, answers) for t in ts}


def with_token_counter(ts: Sequence[Term], count_tokens: Callable[[str], int]) -> list[Term]:
    """The terms, counting completion lengths with the run's tokenizer."""
    return [dataclasses.replace(t, count_tokens=count_tokens) for t in ts]


def tunix_reward_fns(ts: Sequence[Term], record: Callable[[str, list[float]], None]
                     ) -> list[Callable[..., list[float]]]:
    """Adapters Tunix's learner calls; each also hands its values to `record(name, values)`."""
    def adapter(term: Term):
        def fn(prompts: list[str], completions: list[str], answer: Sequence[str],
               **_: Any) -> list[float]:
            values = term(prompts, completions, answer)
            if len(values) != len(completions):  # probed at start; a data-dependent slip
                raise RewardFailed(f"reward {term.name} returned {len(values)} values for "
                                 f"{len(completions)} completions")
            record(term.name, values)
            return values
        fn.__name__ = term.name  # Tunix logs rewards/<__name__>
        return fn
    return [adapter(t) for t in ts]
