"""Statistics over seeds: identical GRPO-family configurations differ by a few points of accuracy
(verl issues #626, #3126), so a difference between groups means something only next to that.
Student-t intervals, with the paired t-test's p from the same t so the two never disagree (the
percentile bootstrap covered the mean 76% of the time at 3 seeds; the t-interval 95% on normal
data, 93.5-94% on Beta(2, 5): tests/test_coverage.py); Holm's adjustment against one baseline;
rliable 1.2.0's IQM and P(X > Y) over tasks (tests/test_rliable_oracle.py). Deterministic (fixed
seed, scipy.special's t): the sweep's table, its parent run and rlexp.report agree."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Callable, Sequence

import numpy as np

CONFIDENCE = 0.95
ALPHA = 1 - CONFIDENCE
N_RESAMPLES = 9999  # stratified bootstrap resamples (scipy.stats.bootstrap's default)
SEED = 0
CI_NAME = "95% t-interval over seeds"  # what the interval is, for tables and plots


@dataclass(frozen=True)
class Summary:
    """Mean, spread and t-interval of one metric over a group's seeds."""
    n: int
    mean: float
    std: float  # sample standard deviation (ddof=1); nan for n=1
    low: float
    high: float


@dataclass(frozen=True)
class Paired:
    """b - a over seeds both ran: mean, t-interval, paired two-sided p and Holm-adjusted p."""
    n: int
    mean: float
    low: float
    high: float
    p: float
    holm: float | None = None  # Holm-adjusted p among `comparisons` vs one baseline (None: one)
    comparisons: int = 1


def t_columns(x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Per column of x[seed, column]: (mean, CI low, CI high, two-sided p of mean 0) from one t:
    mean ± t_(1+c)/2,n-1 · s/√n. One row: nan bounds and p. Zero spread: p 0 (1 at mean 0)."""
    from scipy.special import stdtr, stdtrit
    x = np.asarray(x, dtype=float)
    n = x.shape[0]
    mean = x.mean(axis=0)
    if n < 2:
        nan = np.full(mean.shape, np.nan)
        return mean, nan, nan.copy(), nan.copy()
    se = x.std(axis=0, ddof=1) / math.sqrt(n)
    half = stdtrit(n - 1, (1 + CONFIDENCE) / 2) * se
    with np.errstate(divide="ignore", invalid="ignore"):
        p = np.where(se > 0, 2 * stdtr(n - 1, -np.abs(mean) / se), (mean == 0).astype(float))
    return mean, mean - half, mean + half, p


def summarize(values: Sequence[float]) -> Summary | None:
    """The finite values' mean, std and t-interval (nan bounds below two values)."""
    x = np.asarray(values, dtype=float)
    x = x[np.isfinite(x)]
    if x.size == 0:
        return None
    _, low, high, _ = t_columns(x[:, None])
    std = float(x.std(ddof=1)) if x.size > 1 else math.nan
    return Summary(n=int(x.size), mean=float(x.mean()), std=std, low=float(low[0]),
                   high=float(high[0]))


def paired_difference(a: dict[str, float], b: dict[str, float]) -> Paired | None:
    """b - a over the seeds (keys) both have a finite value for; None without one."""
    seeds = sorted(k for k in a.keys() & b.keys() if math.isfinite(a[k]) and math.isfinite(b[k]))
    if not seeds:
        return None
    d = np.array([[b[s] - a[s]] for s in seeds])
    mean, low, high, p = (float(v[0]) for v in t_columns(d))
    return Paired(n=len(seeds), mean=mean, low=low, high=high, p=1.0 if math.isnan(p) else p)


def holm(p: Sequence[float]) -> list[float]:
    """Holm's step-down p-values (statsmodels' multipletests(method='holm')): the i-th smallest of
    m times (m - i), running maximum, at most 1."""
    order = np.argsort(p, kind="stable")
    m = len(p)
    scaled = np.minimum(1.0, np.maximum.accumulate(
        (m - np.arange(m)) * np.asarray(p, dtype=float)[order])) if m else np.array([])
    out = np.empty(m)
    out[order] = scaled
    return out.tolist()


def with_holm(pairs: list[Paired]) -> list[Paired]:
    """The pairs with Holm-adjusted p among those with two seeds or more (one-seed: no test)."""
    tested = [i for i, pair in enumerate(pairs) if pair.n > 1]
    if len(tested) < 2:
        return pairs
    adjusted = dict(zip(tested, holm([pairs[i].p for i in tested])))
    return [Paired(**{**vars(pair), "holm": adjusted[i], "comparisons": len(tested)})
            if i in adjusted else pair for i, pair in enumerate(pairs)]


def verdict(pair: Paired) -> str:
    """Plain words at the ALPHA level: the raw p says if the interval beside it holds 0, Holm's
    whether that survives the other comparisons."""
    if pair.n < 2:
        return "one seed: no spread to judge it by"
    if pair.p >= ALPHA:
        return "not distinguishable from seed noise"
    if not beyond_noise(pair):
        return f"beyond seed noise alone, not after Holm's correction for {pair.comparisons}"
    return "beyond seed noise"


def beyond_noise(pair: Paired) -> bool:
    """The difference holds at the ALPHA level, after Holm's correction where there is one."""
    return pair.n > 1 and pair.p < ALPHA and (pair.holm is None or pair.holm < ALPHA)


def iqm(scores: np.ndarray) -> np.ndarray:
    """Interquartile mean of scores[..., run, task] (rliable's aggregate_iqm, scipy's
    trim_mean(proportiontocut=0.25, axis=None)): the middle half, int(n/4) cut at each end."""
    x = np.sort(np.reshape(scores, (*np.shape(scores)[:-2], -1)), axis=-1)
    cut = int(0.25 * x.shape[-1])
    return x[..., cut:x.shape[-1] - cut].mean(axis=-1)


def probability_of_improvement(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """P(X > Y) of x[..., run, task] over y (rliable's probability_of_improvement): per task
    the Mann-Whitney U / (n_x n_y), ties counting one half, averaged over tasks."""
    xs = np.asarray(x, dtype=float)[..., :, None, :]
    ys = np.asarray(y, dtype=float)[..., None, :, :]
    per_task = (xs > ys).mean(axis=(-3, -2)) + 0.5 * (xs == ys).mean(axis=(-3, -2))
    return per_task.mean(axis=-1)


def stratified_bootstrap_ci(statistic: Callable[..., np.ndarray], *scores: np.ndarray,
                            n_resamples: int = N_RESAMPLES) -> tuple[float, float]:
    """Percentile CI of statistic(*scores) under rliable's stratified bootstrap: each input's runs
    resampled within each task, per input independently; statistic takes a resample axis first."""
    rng = np.random.default_rng(SEED)
    resampled = []
    for s in scores:
        s = np.asarray(s, dtype=float)
        runs = rng.integers(0, s.shape[0], size=(n_resamples, *s.shape))
        resampled.append(np.take_along_axis(s[None], runs, axis=1))
    values = statistic(*resampled)
    low, high = np.percentile(values, [100 * ALPHA / 2, 100 * (1 - ALPHA / 2)])
    return float(low), float(high)
