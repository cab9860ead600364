"""Data: problems from a dataset (loaders), rendered into prompts (templates, lengths), and the
rewards that score completions (rewards, reward_sets, maxtext_grading, extract). Training batches
are a pure function of (seed, step): resuming at step k needs no iterator state. May import
rlexp.config, rlexp.algo, rlexp.base."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np

from rlexp.data.loaders import Problem, RawSplits, load_problems
from rlexp.data.templates import PromptTemplate

__all__ = ["Example", "Splits", "Problem", "PromptTemplate", "build_splits", "batch_indices",
           "load_problems"]


@dataclass(frozen=True)
class Example:
    prompt: str  # what the policy is given (template and chat format applied)
    answer: str  # reference final answer (canonical number string)
    reference: str  # the completion a perfect policy writes (warm-start target)
    question: str  # the dataset's question, before templating (for logs and samples)


@dataclass
class Splits:
    train: list[Example]
    eval: list[Example]
    skipped: int  # rows skipped by the loader (malformed, no answer)
    truncated: int  # prompts longer than rollout.max_prompt_length, left-truncated
    # Tokens of every rendered prompt (train, then eval) before any cut (rlexp.data.lengths).
    prompt_lengths: list[int] = field(default_factory=list)

    def train_batch(self, step: int, batch_size: int, seed: int) -> dict[str, np.ndarray]:
        """The batch of global step `step` (0-based): numpy arrays, as Tunix's learner wants."""
        rows = [self.train[i] for i in batch_indices(len(self.train), batch_size, seed, step)]
        return {"prompts": np.array([r.prompt for r in rows], dtype=object),
                "answer": np.array([r.answer for r in rows], dtype=object)}


def batch_indices(n: int, batch_size: int, seed: int, step: int) -> np.ndarray:
    """Indices into a dataset of `n` for global step `step`: position p = step * batch_size + j
    lies in epoch p // n, each epoch a permutation seeded by (seed, epoch)."""
    epochs, offsets = np.divmod(step * batch_size + np.arange(batch_size), n)
    out = np.empty(batch_size, dtype=np.int64)
    for epoch in np.unique(epochs):
        perm = np.random.default_rng([seed, int(epoch)]).permutation(n)
        sel = epochs == epoch
        out[sel] = perm[offsets[sel]]
    return out


def build_splits(raw: RawSplits, template: str | PromptTemplate, encode: Callable[[str], list[int]],
                 decode: Callable[[list[int]], str], max_prompt_tokens: int,
                 chat_tokenizer: Any | None = None) -> Splits:
    """Render prompts, left-truncated at `max_prompt_tokens`; `template` an object or a name."""
    tpl = PromptTemplate(template=template) if isinstance(template, str) else template
    truncated = 0
    lengths: list[int] = []

    def convert(p: Problem) -> Example:
        nonlocal truncated
        prompt = tpl.render(p.question, chat_tokenizer)
        ids = encode(prompt)
        lengths.append(len(ids))
        if len(ids) > max_prompt_tokens:
            truncated += 1
            prompt = decode(ids[-max_prompt_tokens:])
        return Example(prompt=prompt, answer=p.answer, question=p.question,
                       reference=tpl.reference(p.answer, p.reasoning))
    return Splits(train=[convert(p) for p in raw.train], eval=[convert(p) for p in raw.eval],
                  skipped=raw.skipped, truncated=truncated, prompt_lengths=lengths)
