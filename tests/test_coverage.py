"""The intervals over seeds cover what they claim: simulated, a 95% interval of a group's mean
and of a paired difference holds the true value 93-97% of the time at 3, 5 and 10 seeds, on
normal and on skewed (Beta(2, 5)) data, and the paired t-test's p is below 0.05 exactly when
the interval beside it excludes 0. (The percentile bootstrap it replaced covered 76% at 3
seeds.)"""

from __future__ import annotations

import numpy as np
import pytest

from rlexp.tracking import seed_stats

SIMULATIONS = 20_000
# Accuracy-like draws: normal around 0.3, and Beta(2, 5) (skewness 0.6) with its true mean.
DATA = {"normal": (lambda rng, shape: rng.normal(0.3, 0.05, shape), 0.3),
        "beta": (lambda rng, shape: rng.beta(2, 5, shape), 2 / 7)}


def covered(x: np.ndarray, truth: float) -> float:
    """The share of simulations (columns of x[seed, simulation]) whose interval holds truth."""
    mean, low, high, p = seed_stats.t_columns(x)
    # one procedure: p < alpha exactly when 0 is outside the interval
    outside = (low > 0) | (high < 0)
    assert np.array_equal(outside, p < seed_stats.ALPHA)
    return float(np.mean((low <= truth) & (truth <= high)))


@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_interval_of_a_mean_covers_95_percent(data, n):
    draw, truth = DATA[data]
    x = draw(np.random.default_rng(n), (n, SIMULATIONS))
    assert 0.93 <= covered(x, truth) <= 0.97


@pytest.mark.parametrize("data", DATA)
@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_interval_of_a_paired_difference_covers_95_percent(data, n):
    """Two configurations on the same seeds: a shared seed effect, a small normal noise for
    the first and the data's own (skewed for beta) for the second, so the differences taken
    seed by seed are as skewed as the data."""
    draw, truth = DATA[data]
    rng = np.random.default_rng(100 + n)
    seed_effect = rng.normal(0, 0.05, (n, SIMULATIONS))
    a = seed_effect + rng.normal(0, 0.02, (n, SIMULATIONS))
    b = seed_effect + draw(rng, (n, SIMULATIONS))
    assert 0.93 <= covered(b - a, truth) <= 0.97


def test_paired_difference_is_the_vectorised_t_on_its_seeds():
    a = {"seed=0": 0.30, "seed=1": 0.25, "seed=2": 0.41}
    b = {"seed=0": 0.36, "seed=1": 0.26, "seed=2": 0.47}
    pair = seed_stats.paired_difference(a, b)
    d = np.array([[b[s] - a[s]] for s in sorted(a)])
    assert (pair.mean, pair.low, pair.high, pair.p) == pytest.approx(
        [float(v[0]) for v in seed_stats.t_columns(d)])
