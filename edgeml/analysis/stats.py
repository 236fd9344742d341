"""Bootstrap intervals over seeds, for exact values and for values known only as bounds (censored runs).

A seed's value is an interval [lo, hi]: equal ends when it was measured, one infinite end when a run never got
there (a time to target is then only known to exceed the run's budget). The mean's interval is the bootstrap of
the lower ends' mean for its low end and of the upper ends' mean for its high end, over the same resamples, so
with exact values it is the ordinary percentile bootstrap of the mean. ``pair_effect`` turns a run's and a
baseline's per-seed intervals into the interval of their effect (a reduction, a ratio, a difference).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

RESAMPLES = 2000
LEVEL = 0.95


def _resampled_means(x: np.ndarray, resamples: int, seed: int) -> np.ndarray:
    """Means of ``resamples`` resamples of the rows of ``x`` (seeds along axis 0). The same seed gives the same
    resamples for equal sizes: lower and upper ends are resampled together."""
    n = x.shape[0]
    with np.errstate(invalid="ignore"):
        return x[np.random.default_rng(seed).integers(0, n, (resamples, n))].mean(axis=1)


def bootstrap_ci(values, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0) -> tuple[float, float, float]:
    """Mean and percentile bootstrap interval of the mean; one value gives (v, v, v); any NaN gives NaNs.

    Infinite values are allowed (a bound): the interval's ends are then order statistics, never interpolated."""
    x = np.asarray(values, dtype=float)
    if x.size == 0 or np.isnan(x).any():
        return math.nan, math.nan, math.nan
    mean = float(x.mean())
    if x.size == 1:
        return mean, mean, mean
    means = _resampled_means(x, resamples, seed)
    if np.isnan(means).any():  # +inf and -inf in one resample: the mean is unknown
        return mean, -math.inf, math.inf
    q = [(1 - level) / 2, (1 + level) / 2]
    if np.isfinite(means).all():
        lo, hi = np.quantile(means, q)
    else:
        lo, hi = np.quantile(means, q[0], method="lower"), np.quantile(means, q[1], method="higher")
    return mean, float(lo), float(hi)


def bootstrap_band(curves, resamples: int = RESAMPLES, level: float = LEVEL, seed: int = 0):
    """Pointwise percentile bootstrap interval of the mean curve: ``curves`` has one row per seed."""
    x = np.asarray(curves, dtype=float)
    means = _resampled_means(x, resamples, seed)
    return np.quantile(means, (1 - level) / 2, axis=0), np.quantile(means, (1 + level) / 2, axis=0)


@dataclass(frozen=True)
class Interval:
    """The mean over seeds of values known as intervals, with its bootstrap interval.

    ``low``/``high``: the mean of the lower / upper ends (equal when every seed was measured); ``ci_low``,
    ``ci_high``: the 95% bootstrap interval; ``n``: the number of seeds."""

    low: float
    high: float
    ci_low: float
    ci_high: float
    n: int

    @property
    def exact(self) -> bool:
        return self.low == self.high

    @property
    def point(self) -> float:
        return self.low if self.exact else math.nan


def mean_interval(lo, hi) -> Interval:
    """The mean of per-seed intervals [lo_i, hi_i] and its bootstrap interval (see the module docstring)."""
    lo, hi = np.asarray(lo, dtype=float), np.asarray(hi, dtype=float)
    m_lo, ci_lo, _ = bootstrap_ci(lo)
    m_hi, _, ci_hi = bootstrap_ci(hi)
    return Interval(m_lo, m_hi, ci_lo, ci_hi, int(lo.size))


def pair_effect(kind: str, r_lo, r_hi, b_lo, b_hi) -> tuple:
    """The effect's interval per seed from the run's and the baseline's intervals (monotone in each side)."""
    with np.errstate(all="ignore"):
        if kind == "reduction":
            return 1 - r_hi / b_lo, 1 - r_lo / b_hi
        if kind == "ratio":
            return b_lo / r_hi, b_hi / r_lo
        return b_lo - r_hi, b_hi - r_lo
