"""Advantage estimators (algo.advantage): hand-computed values, and verl 0.9.1's own
core_algos.py estimators on the same rewards and masks (24 cases each: group sizes 2, 4, 8 x
4 draws x 2 batch sizes), in a child process (tests/verl_oracle.py)."""

from __future__ import annotations

import numpy as np
import pytest

from conftest import require
from rlexp.algo.advantages import (advantages_by_name, masked_whiten, reinforce_pp_scores,
                                   rloo_advantages)
from verl_oracle import verl_advantages, verl_available

VERL_NAMES = {"rloo": "rloo", "reinforce_pp": "reinforce_plus_plus",
              "reinforce_pp_baseline": "reinforce_plus_plus_baseline"}
DRAWS = [(g, seed, groups) for g in (2, 4, 8) for seed in range(4) for groups in (2, 3)]
CASES = [(name, *draw) for name in VERL_NAMES for draw in DRAWS]


def draw(g: int, seed: int, groups: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(100 * g + 10 * seed + groups)
    b, t = g * groups, 7
    rewards = rng.choice([0.0, 0.25, 1.0, 2.0], size=b).astype(np.float32)
    if seed == 0:
        rewards[:g] = 1.0  # one group of equal rewards
    rewards[-g], rewards[-1] = 0.0, 2.0  # and the last one varies
    lengths = rng.integers(1, t + 1, size=b)
    mask = (np.arange(t)[None, :] < lengths[:, None]).astype(np.float32)
    return rewards, mask


def rlexp_token_advantages(name: str, rewards: np.ndarray, mask: np.ndarray, g: int):
    values = advantages_by_name(name, rewards, g)
    if name == "rloo":
        return values[:, None] * mask
    return masked_whiten(values, mask)


def test_rloo_by_hand():
    got = rloo_advantages(np.array([1.0, 0.0, 0.5, 1.0]), 4)
    np.testing.assert_allclose(got, [1 - 1.5 / 3, 0 - 2.5 / 3, 0.5 - 2 / 3, 1 - 1.5 / 3],
                               rtol=1e-6)
    assert np.all(rloo_advantages(np.array([3.0, 3.0, 1.0, 1.0]), 2) == 0)


def test_reinforce_pp_whitens_over_tokens_by_hand():
    # two rows of 1 and 3 tokens, scores 1 and 0: the tokens are [1, 0, 0, 0]
    mask = np.array([[1, 0, 0], [1, 1, 1]], np.float32)
    got = masked_whiten(reinforce_pp_scores(np.array([1.0, 0.0]), 2, baseline=False), mask)
    tokens = np.array([1.0, 0.0, 0.0, 0.0])
    z = (tokens - tokens.mean()) / np.sqrt(tokens.var(ddof=1) + 1e-8)
    np.testing.assert_allclose(got[mask > 0], z, rtol=1e-6)
    assert np.all(got[mask == 0] == 0)
    # the baseline variant subtracts the group mean first: [0.5, -0.5]
    np.testing.assert_allclose(reinforce_pp_scores(np.array([1.0, 0.0]), 2, baseline=True),
                               [0.5, -0.5])


@pytest.fixture(scope="module")
def verl_results():
    require(verl_available(), "verl (and torch) are not installed in the torch directory",
            "bash scripts/setup --test")
    arrays, cases = {}, []
    for i, (name, g, seed, groups) in enumerate(CASES):
        rewards, mask = draw(g, seed, groups)
        arrays[f"r{i}"], arrays[f"m{i}"] = rewards, mask
        cases.append(dict(estimator=VERL_NAMES[name], rewards=f"r{i}", mask=f"m{i}",
                          group_size=g))
    return dict(zip(CASES, verl_advantages(arrays, cases)))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)))
def test_advantages_equal_verls(verl_results, case):
    name, g, seed, groups = case
    rewards, mask = draw(g, seed, groups)
    want = verl_results[case]["advantages"]
    got = rlexp_token_advantages(name, rewards, mask, g)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
    assert np.abs(want).max() > 0.1
