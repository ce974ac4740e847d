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


# The binomial's mass further than this many standard deviations (plus a margin for
# small n) from its mean is left out of the sums: below 1e-30, far under any decision
WINDOW_SD = 12.0
WINDOW_MARGIN = 10


def binomial_cdf(n: int, p: float) -> tuple[int, FloatArray]:
    """(k0, F) with F[i] = P(X <= k0 + i) for k0 + i up to the window's end, X ~
    Binomial(n, p), 0 < p < 1: the terms in log space over a window of WINDOW_SD
    standard deviations around the mean (the whole of 0..n for small n); P(X < k0) is
    taken as 0 and P(X <= k) as 1 beyond the window."""
    spread = WINDOW_SD * math.sqrt(n * p * (1 - p)) + WINDOW_MARGIN
    k0 = max(0, math.floor(n * p - spread))
    k1 = min(n, math.ceil(n * p + spread))
    first = (
        math.lgamma(n + 1)
        - math.lgamma(k0 + 1)
        - math.lgamma(n - k0 + 1)
        + k0 * math.log(p)
        + (n - k0) * math.log1p(-p)
    )
    k = np.arange(k0 + 1, k1 + 1, dtype=np.float64)
    steps = np.log((n - k + 1) / k) + math.log(p / (1 - p))
    logs = first + np.concatenate(([0.0], np.cumsum(steps)))
    weights = np.exp(logs - logs.max())
    cdf: FloatArray = np.cumsum(weights) / weights.sum()
    return k0, cdf


def _cdf_at(k0: int, cdf: FloatArray, k: int) -> float:
    if k < k0:
        return 0.0
    return float(cdf[k - k0]) if k - k0 < cdf.size else 1.0


def order_ranks(n: int, p: float, confidence: float = CONFIDENCE) -> tuple[int, int] | None:
    """(l, u), 1-based orders of the interval's ends; None when n is too small."""
    if n < 1:
        return None
    k0, cdf = binomial_cdf(n, p)
    miss = (1 - confidence) / 2
    # order r (1..n) has the tail F(r-1); the window holds F(k) for k = k0..k0+size-1
    last = min(n - 1, k0 + cdf.size - 1)
    window = cdf[: last - k0 + 1]
    low_ok = np.flatnonzero(window <= miss)
    if low_ok.size:
        low = k0 + int(low_ok[-1]) + 1
    elif k0 > 0:
        low = k0  # F(k0 - 1) is below the window: 0
    else:
        return None
    high_ok = np.flatnonzero(window >= 1 - miss)
    if not high_ok.size:
        return None  # F(n - 1) stays under 1 - miss: too few samples
    return low, k0 + int(high_ok[0]) + 1


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
    k0, cdf = binomial_cdf(n, percentile / 100)
    # P(low <= X <= high - 1)
    coverage = _cdf_at(k0, cdf, high - 1) - _cdf_at(k0, cdf, low - 1)
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
