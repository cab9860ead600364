"""Held-out evaluation: greedy accuracy, format and partial credit, pass@k of sampled answers.

`eval_metrics` is a pure function of completions and references (tested directly);
`evaluate` runs the engine's rollouts to get the completions.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from rlexp.data import rewards

if TYPE_CHECKING:
    from rlexp.engine import Engine


def eval_metrics(greedy: Sequence[str], sampled: Sequence[Sequence[str]], answers: Sequence[str],
                 terms: Sequence[rewards.Term], template: str, reasoning_tag: str = "reasoning",
                 prompts: Sequence[str] | None = None) -> dict[str, float]:
    """Metrics of one evaluation.

    greedy[i]: the greedy completion of prompt i; sampled[i]: its k sampled completions.
    accuracy/format/partial are of greedy completions, unweighted (independent of
    cfg.reward); mean_reward is the run's weighted reward of greedy completions;
    pass_at_k = fraction of prompts with at least one exactly right sampled answer.
    """
    correct = [rewards.answer_exact(c, a) for c, a in zip(greedy, answers)]
    weighted = rewards.score_all(terms, greedy, answers, prompts)
    total = np.sum([v for v in weighted.values()], axis=0)
    sampled_correct = [[rewards.answer_exact(c, a) for c in group]
                       for group, a in zip(sampled, answers)]
    return {
        "eval/accuracy": float(np.mean(correct)),
        "eval/partial_accuracy": float(np.mean([rewards.answer_close(c, a)
                                                for c, a in zip(greedy, answers)])),
        "eval/format_accuracy": float(np.mean([rewards.format_exact(c, a, template, reasoning_tag)
                                               for c, a in zip(greedy, answers)])),
        "eval/mean_reward": float(np.mean(total)),
        "eval/pass_at_k": float(np.mean([max(g) if g else 0.0 for g in sampled_correct])),
        "eval/sampled_accuracy": float(np.mean([np.mean(g) for g in sampled_correct if g])),
    }


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
                "correct": bool(rewards.answer_exact(c, e.answer))}
               for i, (e, c) in enumerate(zip(examples, greedy))][: cfg.eval.keep_samples]
    return metrics, samples
