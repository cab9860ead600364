"""Prompt lengths against rollout.max_prompt_length, counted once at start (pure): the sampler
keeps a prompt's last tokens, so a run of mostly cut prompts trains on noise."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Optional, Sequence

from rlexp.base.errors import UserError

KEY = "rollout.max_prompt_length"
FIT_SHARE = 0.99  # share of the prompts the suggested rollout.max_prompt_length fits


@dataclass(frozen=True)
class PromptLengths:
    total: int  # prompts counted
    over: int  # prompts longer than the limit (they are cut)
    longest: int  # tokens of the longest prompt (0 for none)
    p99: int  # smallest length that fits FIT_SHARE of the prompts (0 for none)


def prompt_lengths(lengths: Sequence[int], limit: int) -> PromptLengths:
    """Count of `lengths` over `limit`, the longest, and the length that fits 99% of them."""
    ordered = sorted(int(n) for n in lengths)
    if not ordered:
        return PromptLengths(0, 0, 0, 0)
    over = sum(1 for n in ordered if n > limit)
    fit = ordered[max(math.ceil(FIT_SHARE * len(ordered)) - 1, 0)]
    return PromptLengths(len(ordered), over, ordered[-1], fit)


def check_prompt_lengths(lengths: Sequence[int], limit: int, max_fraction: float) -> Optional[str]:
    """None if all prompts fit; a warning if at most `max_fraction` are cut; else UserError."""
    got = prompt_lengths(lengths, limit)
    if got.over == 0:
        return None
    if got.over > max_fraction * got.total:
        raise UserError(
            f"{KEY}={limit} is too short: {got.over} of {got.total} prompts are longer "
            f"(longest {got.longest} tokens), more than dataset.max_truncated_fraction="
            f"{max_fraction:g}; set {KEY}={got.p99} to fit 99% of them")
    return (f"{got.over} of {got.total} prompts exceed {KEY}={limit} "
            f"(longest {got.longest} tokens); they are cut")
