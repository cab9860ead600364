"""Held-out evaluation: greedy accuracy, format and partial credit, pass@k of sampled answers.
`eval_metrics` is a pure function of completions and references; `evaluate` samples them."""

from __future__ import annotations

import time
from collections import Counter
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from rlexp.data import maxtext_grading, reward_sets, rewards

if TYPE_CHECKING:
    from rlexp.engine import Engine

_MAXTEXT_FNS = (reward_sets.maxtext_format_exact, reward_sets.maxtext_format_approx,
                reward_sets.maxtext_check_answer, reward_sets.maxtext_check_numbers)


def maxtext_number(text: str | None) -> float | None:
    """evaluate_rl's value of an extracted number: ',' and '$' removed, float; None if not."""
    try:
        return float((text or "").replace(",", "").replace("$", "").strip())
    except ValueError:
        return None


def maxtext_score_responses(responses: Sequence[str], answer: str,
                            reasoning_tag: str = "reasoning") -> tuple[bool, bool, bool]:
    """MaxText's evaluate_rl.score_responses (a4de80cc5): (correct, partially correct, format)
    of one question's responses. The number is the first after <answer> ("-1000000" when
    none); correct = equal floats, partial = ratio to the reference in [0.9, 1.1], format =
    the format regex found. Like the source, `correct` is the last response's verdict
    unless an earlier one met all three (with one greedy response: that response's)."""
    match_format = reward_sets.maxtext_format_regex(reasoning_tag)
    correct = partial = fmt = False
    for response in responses:
        got = reward_sets.maxtext_first_number(response)
        value, ref = maxtext_number("-1000000" if got is None else got), maxtext_number(answer)
        if value is not None and ref is not None:
            correct = value == ref
            if ref != 0 and 0.9 <= value / ref <= 1.1:
                partial = True
        if match_format.search(response) is not None:
            fmt = True
        if correct and partial and fmt:
            break
    return correct, partial, fmt


def maxtext_majority(responses: Sequence[str]) -> str | None:
    """maj@k as MaxText's eval_mode=maj: Counter.most_common, first seen wins a tie."""
    extracted = [reward_sets.maxtext_first_number(r) or "-1000000" for r in responses]
    return Counter(extracted).most_common(1)[0][0] if extracted else None


def uses_maxtext_rewards(terms: Sequence[rewards.Term]) -> bool:
    """The run's reward set is MaxText's (reward=maxtext): evaluate as MaxText does."""
    return any(t.fn in _MAXTEXT_FNS for t in terms)


def _maxtext_metrics(scored: Sequence[Sequence[float]], each: Sequence[Sequence[float]],
                     maj: Sequence[bool]) -> dict[str, float]:
    """The eval/ metrics of MaxText's scores: greedy verdicts, sampled correctness, maj@k."""
    return {
        "eval/accuracy": float(np.mean([s[0] for s in scored])),
        "eval/partial_accuracy": float(np.mean([s[1] for s in scored])),
        "eval/format_accuracy": float(np.mean([s[2] for s in scored])),
        "eval/pass_at_k": float(np.mean([any(g) for g in each])),
        "eval/maj_at_k": float(np.mean(maj)),
        "eval/sampled_accuracy": float(np.mean([np.mean(g) for g in each if g])),
    }


def maxtext_eval_metrics(greedy: Sequence[str], sampled: Sequence[Sequence[str]],
                         answers: Sequence[str], reasoning_tag: str) -> dict[str, float]:
    """evaluate_rl's default verdicts of the greedy completions; pass@k, maj@k of the sampled."""
    scored = [maxtext_score_responses([c], a, reasoning_tag) for c, a in zip(greedy, answers)]
    each = [[maxtext_score_responses([c], a, reasoning_tag)[0] for c in group]
            for group, a in zip(sampled, answers)]
    maj = [maxtext_number(maxtext_majority(g)) == r if g and r is not None else False
           for g, r in zip(sampled, [maxtext_number(a) for a in answers])]
    return _maxtext_metrics(scored, each, maj)


_MAXTEXT_CURRENT_FNS = (reward_sets.maxtext_current_format_exact,
                        reward_sets.maxtext_current_format_approx,
                        reward_sets.maxtext_current_check_numbers)


def maxtext_current_score_responses(responses: Sequence[str], answer: str,
                                    reasoning_tag: str = "reasoning", eval_mode: str = "pass",
                                    reasoning_start_in_prompt: bool = False
                                    ) -> tuple[Any, Any, Any]:
    """evaluate_rl.score_responses at e591f30cb: (correct, partially correct, format) of one
    question's responses. Each response's answer is `maxtext_grading.extract_answer`'s,
    judged by `check_correctness` (math_verify; partial = within 10%), format = the unanchored
    format regex found. eval_mode pass (rl.yml's): the first response right on all three, else
    the last one's verdicts; maj: the verdict of the most frequent answer (first seen wins a
    tie), format if any response giving it is well formatted; pass_at_1: the fractions."""
    match_format = reward_sets.maxtext_current_format_regex(reasoning_tag,
                                                            reasoning_start_in_prompt)
    extracted = [maxtext_grading.extract_answer(r) for r in responses]
    if not extracted:
        return False, False, False

    def single(got: str, raw: str) -> tuple[bool, bool, bool]:
        fmt = match_format.search(raw) is not None
        try:
            return (*maxtext_grading.check_correctness(got, [answer]), fmt)
        except Exception:  # as the source: a failed grading is wrong, not a crash
            return False, False, fmt
    if eval_mode == "maj":
        majority = Counter(extracted).most_common(1)[0][0]
        fmt = any(match_format.search(responses[i]) is not None
                  for i, got in enumerate(extracted) if got == majority)
        correct, partial, _ = single(majority, responses[0])
        return correct, partial, fmt
    if eval_mode == "pass":
        result = (False, False, False)
        for got, raw in zip(extracted, responses):
            result = single(got, raw)
            if all(result):
                return result
        return result
    if eval_mode == "pass_at_1":
        scores = [single(got, raw) for got, raw in zip(extracted, responses)]
        return tuple(sum(s[j] for s in scores) / len(scores) for j in range(3))
    raise ValueError(f"Unknown eval_mode: {eval_mode!r}")


def uses_maxtext_current_rewards(terms: Sequence[rewards.Term]) -> bool:
    """The run's reward set is MaxText's newest (reward=maxtext_current)."""
    return any(t.fn in _MAXTEXT_CURRENT_FNS for t in terms)


def _start_in_prompt(terms: Sequence[rewards.Term]) -> bool:
    """reasoning_start_in_prompt as the run's format reward takes it (kwargs), False if unset."""
    return any(bool(t.kwargs.get("reasoning_start_in_prompt", False)) for t in terms
               if t.fn in _MAXTEXT_CURRENT_FNS)


def maxtext_current_eval_metrics(greedy: Sequence[str], sampled: Sequence[Sequence[str]],
                                 answers: Sequence[str], reasoning_tag: str,
                                 start_in_prompt: bool = False) -> dict[str, float]:
    """evaluate_rl's (e591f30cb) eval_mode=pass of the greedy; pass@k, pass_at_1, maj@k."""
    kw = {"reasoning_tag": reasoning_tag, "reasoning_start_in_prompt": start_in_prompt}
    scored = [maxtext_current_score_responses([c], a, **kw) for c, a in zip(greedy, answers)]
    each = [[maxtext_current_score_responses([c], a, **kw)[0] for c in group]
            for group, a in zip(sampled, answers)]
    maj = [maxtext_current_score_responses(list(g), a, eval_mode="maj", **kw)[0] if g else False
           for g, a in zip(sampled, answers)]
    return _maxtext_metrics(scored, each, maj)


def uses_easydel_rewards(terms: Sequence[rewards.Term]) -> bool:
    """The run's reward set is EasyDeL's tutorial's (reward=easydel_numina)."""
    return any(t.fn is reward_sets.easydel_accuracy for t in terms)


def easydel_eval_metrics(greedy: Sequence[str], sampled: Sequence[Sequence[str]],
                         answers: Sequence[str]) -> dict[str, float]:
    """The tutorial's own verdicts (it evaluates its rewards on the test split): accuracy_reward
    and format_reward of the greedy completions; the answers are whole gold solutions."""
    acc = reward_sets.easydel_accuracy([""] * len(greedy), greedy, answers)
    fmt = reward_sets.easydel_format([""] * len(greedy), greedy, answers)
    each = [reward_sets.easydel_accuracy([""] * len(g), list(g), [a] * len(g))
            for g, a in zip(sampled, answers)]
    return {
        "eval/accuracy": float(np.mean(acc)), "eval/format_accuracy": float(np.mean(fmt)),
        "eval/pass_at_k": float(np.mean([max(g) if g else 0.0 for g in each])),
        "eval/sampled_accuracy": float(np.mean([np.mean(g) for g in each if g])),
    }


def eval_metrics(greedy: Sequence[str], sampled: Sequence[Sequence[str]], answers: Sequence[str],
                 terms: Sequence[rewards.Term], template: str, reasoning_tag: str = "reasoning",
                 prompts: Sequence[str] | None = None) -> dict[str, float]:
    """One evaluation's metrics from greedy[i] and k sampled[i] completions of prompt i; MaxText's
    and EasyDeL's reward sets get their own answer metrics (above)."""
    weighted = rewards.score_all(terms, greedy, answers, prompts)
    mean_reward = float(np.mean(np.sum(list(weighted.values()), axis=0)))
    if uses_maxtext_rewards(terms):
        return {**maxtext_eval_metrics(greedy, sampled, answers, reasoning_tag),
                "eval/mean_reward": mean_reward}
    if uses_easydel_rewards(terms):
        return {**easydel_eval_metrics(greedy, sampled, answers), "eval/mean_reward": mean_reward}
    if uses_maxtext_current_rewards(terms):
        return {**maxtext_current_eval_metrics(greedy, sampled, answers, reasoning_tag,
                                               _start_in_prompt(terms)),
                "eval/mean_reward": mean_reward}
    correct = [rewards.answer_exact(c, a) for c, a in zip(greedy, answers)]
    sampled_correct = [[rewards.answer_exact(c, a) for c in group]
                       for group, a in zip(sampled, answers)]
    return {
        "eval/accuracy": float(np.mean(correct)),
        "eval/partial_accuracy": float(np.mean([rewards.answer_close(c, a)
                                                for c, a in zip(greedy, answers)])),
        "eval/format_accuracy": float(np.mean([rewards.format_exact(c, a, template, reasoning_tag)
                                               for c, a in zip(greedy, answers)])),
        "eval/mean_reward": mean_reward,
        "eval/pass_at_k": float(np.mean([max(g) if g else 0.0 for g in sampled_correct])),
        "eval/sampled_accuracy": float(np.mean([np.mean(g) for g in sampled_correct if g])),
    }


def pass_at_k_label(metrics: dict[str, float]) -> str:
    """'pass@4': k as the evaluation sampled it (eval/k)."""
    k = metrics.get("eval/k")
    return f"pass@{int(k)}" if k else "pass@k"


def _correct(terms: Sequence[rewards.Term], completion: str, answer: str,
             reasoning_tag: str) -> bool:
    """One completion's verdict, by the same rule as eval/accuracy."""
    if uses_maxtext_rewards(terms):
        return maxtext_score_responses([completion], answer, reasoning_tag)[0]
    if uses_easydel_rewards(terms):
        return reward_sets.easydel_accuracy([""], [completion], [answer])[0] == 1.0
    if uses_maxtext_current_rewards(terms):
        return bool(maxtext_current_score_responses([completion], answer, reasoning_tag,
                                                    reasoning_start_in_prompt=
                                                    _start_in_prompt(terms))[0])
    return bool(rewards.answer_exact(completion, answer))


def evaluate(engine: "Engine", key: Any) -> tuple[dict[str, float], list[dict[str, Any]]]:
    """Greedy and k-sampled completions of the first eval.num_samples held-out prompts."""
    cfg = engine.cfg
    started = time.perf_counter()
    examples = engine.splits.eval[: cfg.eval.num_samples]
    prompts = [e.prompt for e in examples]
    answers = [e.answer for e in examples]
    k = cfg.eval.pass_k
    greedy = engine.generate(prompts, key, greedy=True)
    flat = engine.generate([p for p in prompts for _ in range(k)], key, greedy=False)
    sampled = [flat[i * k:(i + 1) * k] for i in range(len(prompts))]
    metrics = eval_metrics(greedy, sampled, answers, engine.terms, cfg.dataset.template,
                           cfg.dataset.reasoning_tag, prompts)
    metrics["eval/k"] = float(k)
    metrics["time/eval_s"] = time.perf_counter() - started
    weighted = rewards.score_all(engine.terms, greedy, answers, prompts)
    samples = [{"prompt": e.prompt, "completion": c, "answer": e.answer,
                "reward": float(sum(v[i] for v in weighted.values())),
                "correct": _correct(engine.terms, c, e.answer, cfg.dataset.reasoning_tag)}
               for i, (e, c) in enumerate(zip(examples, greedy))][: cfg.eval.keep_samples]
    return metrics, samples
