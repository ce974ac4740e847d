"""How precisely a point's samples pin a percentile: the distribution-free interval from
order statistics (pure numpy), for --target-precision.

Of n independent samples, the count below the true p-quantile is Binomial(n, p), so the
l-th and u-th smallest samples bracket it with probability F(u-1) - F(l-1) (F the
binomial CDF). l is the largest order with F(l-1) <= (1 - confidence)/2 and u the
smallest with F(u-1) >= (1 + confidence)/2: each tail at most half the miss, so the
coverage is at least `confidence` (a discrete distribution cannot hit it exactly). Too
few samples for either end: no interval. The half-width is (high - low) / 2, held to the
percentile as the point publishes it (numpy's linear percentile).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from loadgen.metrics.arrays import FloatArray

CONFIDENCE = 0.95


@dataclass(frozen=True, slots=True)
class PercentileInterval:
    samples: int
    value: float  # the percentile as published
    low: float
    high: float
    coverage: float  # the interval's own probability of holding the quantile

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2

    @property
    def relative(self) -> float:
        """The half-width over the value (inf for a value of 0)."""
        return self.half_width / self.value if self.value > 0 else math.inf


def binomial_cdf(n: int, p: float) -> FloatArray:
    """F(k) = P(X <= k) for k = 0..n, X ~ Binomial(n, p), 0 < p < 1 (log-space terms)."""
    k = np.arange(1, n + 1, dtype=np.float64)
    steps = np.log((n - k + 1) / k) + math.log(p / (1 - p))
    logs = n * math.log1p(-p) + np.concatenate(([0.0], np.cumsum(steps)))
    weights = np.exp(logs - logs.max())
    cdf: FloatArray = np.cumsum(weights) / weights.sum()
    return cdf


def order_ranks(n: int, p: float, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """(l, u), 1-based orders of the interval's ends; None when n is too small."""
    if n < 1:
        return None
    cdf = binomial_cdf(n, p)
    miss = (1 - confidence) / 2
    # order r (1..n) at index r - 1: its tail is F(r-1) = cdf[r - 1]
    low_ok = np.flatnonzero(cdf[:n] <= miss)
    high_ok = np.flatnonzero(cdf[:n] >= 1 - miss)
    if low_ok.size == 0 or high_ok.size == 0:
        return None
    return int(low_ok[-1]) + 1, int(high_ok[0]) + 1


def percentile_interval(
    values: FloatArray, percentile: float, confidence: float = CONFIDENCE
) -> PercentileInterval | None:
    """The order-statistic interval of `percentile` (0 < percentile < 100) over `values`."""
    n = int(values.size)
    ranks = order_ranks(n, percentile / 100, confidence)
    if ranks is None:
        return None
    low, high = ranks
    ordered = np.sort(values)
    cdf = binomial_cdf(n, percentile / 100)
    coverage = float(cdf[high - 1] - cdf[low - 1])  # P(low <= X <= high - 1)
    return PercentileInterval(
        n,
        float(np.percentile(values, percentile)),
        float(ordered[low - 1]),
        float(ordered[high - 1]),
        coverage,
    )


def worst_relative(
    values: FloatArray, percentile: float, extra: int, confidence: float = CONFIDENCE
) -> float:
    """The largest relative half-width the interval can have once up to `extra` more
    samples of any value join `values` (inf when it cannot be bounded): what a point that
    stops sending now, with requests still in flight, will publish at worst.

    With m samples added (n' = n + m), the r-th smallest of the union is at most x_r
    (r <= n) and at least x_(r-m) (r > m). So the union's interval lies inside
    [x_(l'-m), x_(u')] for its orders (l', u'), and its percentile (linear, between its
    j-th and (j+1)-th smallest, j = floor((n'-1)p) + 1) is at least x_(j-m)."""
    ordered = np.sort(values)
    n = int(ordered.size)
    p = percentile / 100
    worst = 0.0
    for m in range(extra + 1):
        ranks = order_ranks(n + m, p, confidence)
        if ranks is None:
            return math.inf
        low, high = ranks
        j = math.floor((n + m - 1) * p) + 1
        if low - m < 1 or high > n or j - m < 1:
            return math.inf
        floor_value = float(ordered[j - m - 1])
        if floor_value <= 0:
            return math.inf
        half = (float(ordered[high - 1]) - float(ordered[low - m - 1])) / 2
        worst = max(worst, half / floor_value)
    return worst
