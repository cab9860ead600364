"""Statistics over seeds: a bootstrap CI of a mean, and the paired difference of two
configurations run on the same seeds (its CI and a paired permutation p-value). Identical
GRPO-family configurations differ by a few points of accuracy (verl issues #626, #3126), so a
difference between sweep groups means something only next to that spread.

Deterministic NumPy (a fixed seed): the sweep's table, its parent run and `python -m
rlexp.report` agree. As scipy.stats.bootstrap(method="percentile") and permutation_test(
permutation_type="samples") (checked in the tests), without importing scipy (0.6 s).
"""

from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Sequence

import numpy as np

CONFIDENCE = 0.95
# Resamples of the bootstrap (scipy.stats.bootstrap's default is 9999).
N_RESAMPLES = 9999
# Up to 2**16 sign patterns the permutation test enumerates every one (exact p-value).
EXACT_PERMUTATIONS = 2 ** 16
SEED = 0
# What the interval is, for tables and plots.
CI_NAME = "95% bootstrap CI over seeds"


@dataclass(frozen=True)
class Summary:
    """Mean, spread and bootstrap CI of one metric over a group's seeds."""
    n: int
    mean: float
    # Sample standard deviation (ddof=1); nan for n=1.
    std: float
    low: float
    high: float


@dataclass(frozen=True)
class Paired:
    """b - a over the seeds both ran: mean difference, its CI, a two-sided p-value."""
    n: int
    mean: float
    low: float
    high: float
    p: float

    @property
    def min_p(self) -> float:
        """The smallest two-sided p-value n pairs can give (2 / 2**n): 0.25 for 3 seeds."""
        return min(1.0, 2.0 / 2 ** self.n) if self.n else 1.0


def _clean(values: Sequence[float]) -> np.ndarray:
    x = np.asarray(values, dtype=float)
    return x[np.isfinite(x)]


def bootstrap_ci(values: Sequence[float]) -> tuple[float, float]:
    """Percentile bootstrap CI of the mean: resample the values with replacement N_RESAMPLES
    times and take the (1-c)/2 and (1+c)/2 quantiles of the resampled means. One value: (nan,
    nan) (no spread to resample)."""
    x = _clean(values)
    if x.size < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(SEED)
    means = x[rng.integers(0, x.size, size=(N_RESAMPLES, x.size))].mean(axis=1)
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.percentile(means, [100 * alpha, 100 * (1 - alpha)])
    return float(low), float(high)


def bootstrap_band(values: np.ndarray, n_resamples: int = 2000) -> tuple[np.ndarray, np.ndarray]:
    """Per-column percentile bootstrap CI of the mean of values[seed, step] (curve bands);
    the same seeds are drawn for every step, as a curve is one run."""
    x = np.asarray(values, dtype=float)
    if x.shape[0] < 2:
        return np.full(x.shape[1], np.nan), np.full(x.shape[1], np.nan)
    rng = np.random.default_rng(SEED)
    means = x[rng.integers(0, x.shape[0], size=(n_resamples, x.shape[0]))].mean(axis=1)
    alpha = (1 - CONFIDENCE) / 2
    low, high = np.percentile(means, [100 * alpha, 100 * (1 - alpha)], axis=0)
    return low, high


def summarize(values: Sequence[float]) -> Summary | None:
    x = _clean(values)
    if x.size == 0:
        return None
    low, high = bootstrap_ci(x)
    std = float(x.std(ddof=1)) if x.size > 1 else math.nan
    return Summary(n=int(x.size), mean=float(x.mean()), std=std, low=low, high=high)


def permutation_p(diffs: Sequence[float]) -> float:
    """Two-sided p-value of a paired permutation test of the mean difference (each difference's
    sign flips freely under the null): all 2**n sign patterns up to EXACT_PERMUTATIONS, else
    N_RESAMPLES random ones (p = (k + 1) / (n + 1)). As scipy.stats.permutation_test: 2 * the
    smaller one-sided p, at most 1, with a relative tolerance for ties."""
    d = _clean(diffs)
    if d.size == 0:
        return math.nan
    observed = d.mean()
    exact = 2 ** d.size <= EXACT_PERMUTATIONS
    if exact:
        signs = np.array(list(itertools.product((1.0, -1.0), repeat=d.size)))
    else:
        rng = np.random.default_rng(SEED)
        signs = rng.choice((1.0, -1.0), size=(N_RESAMPLES, d.size))
    null = (signs * d).mean(axis=1)
    # scipy's tolerance: statistics equal up to rounding count as ties
    gamma = abs(1e-14 * observed) if observed else 1e-14
    less, greater = np.sum(null <= observed + gamma), np.sum(null >= observed - gamma)
    total = null.size
    if not exact:
        less, greater, total = less + 1, greater + 1, total + 1
    return float(min(1.0, 2 * min(less, greater) / total))


def paired_difference(a: dict[str, float], b: dict[str, float]) -> Paired | None:
    """b - a over the seeds (keys) both have a finite value for; None without one."""
    seeds = sorted(k for k in a.keys() & b.keys()
                   if math.isfinite(a[k]) and math.isfinite(b[k]))
    if not seeds:
        return None
    d = np.array([b[s] - a[s] for s in seeds])
    low, high = bootstrap_ci(d)
    return Paired(n=len(seeds), mean=float(d.mean()), low=low, high=high,
                  p=permutation_p(d))


def verdict(pair: Paired) -> str:
    """Plain words for a paired difference, at the 1 - CONFIDENCE level."""
    if pair.n < 2:
        return "one seed: no spread to judge it by"
    if pair.p < 1 - CONFIDENCE:
        return "beyond seed noise"
    if pair.min_p >= 1 - CONFIDENCE:
        return (f"not distinguishable from seed noise (no p on {pair.n} seeds falls below "
                f"{pair.min_p:.2g})")
    return "not distinguishable from seed noise"
