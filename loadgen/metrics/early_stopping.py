"""MLPerf LoadGen's early-stopping rule for a latency percentile (pure numpy).

Read from mlcommons/inference loadgen/early_stopping.cc (`odds`, `find_min_passing`) and
results.cc (`PerformanceSummary::EarlyStopping`) at commit b66003e10e2d, for behaviour
only. With confidence c = 0.99 (tolerance d = 0), a run of n samples of which t are over
a latency bound may claim that the p-th percentile is within the bound when
n >= h(t) + t, where h(t) is the least h with

    P(at most t of h + t samples over the bound | each over with probability 1 - p) < 1 - c

(LoadGen's BetaRegularized[p, h, 1 + t]: the binomial CDF). Two uses, as LoadGen's:
- a bound given (the Server scenario's target latency; here an `--slo` bound): t counts
  the samples strictly over it, and the run has enough samples when n >= h(t) + t;
- no bound (the SingleStream/MultiStream estimate): the largest t with n >= h(t) + t
  (t >= 1), and the estimate is the t-th largest sample, the least bound the run can
  claim; fewer than h(1) + 1 samples (662 for p99) give no estimate.

The CDF is summed in log space from the binomial terms' ratios (LoadGen sums a
hypergeometric series instead: the two agree but for the last bits, which can only
matter for a sum within ~1e-12 of 0.01).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from loadgen.metrics.arrays import FloatArray

CONFIDENCE = 0.99


def at_most(t: int, n: int, q: float) -> float:
    """P(X <= t) for X ~ Binomial(n, q), 0 <= t, 0 < q < 1."""
    if t >= n:
        return 1.0
    k = np.arange(1, t + 1, dtype=np.float64)
    steps = np.log((n - k + 1) / k) + math.log(q / (1 - q))
    logs = n * math.log1p(-q) + np.concatenate(([0.0], np.cumsum(steps)))
    top = float(logs.max())
    return math.exp(top) * float(np.exp(logs - top).sum())


def passes(h: int, t: int, p: float, confidence: float = CONFIDENCE) -> bool:
    """LoadGen's `odds(h, t, p, 0) < 1 - c`: h under the bound and t over it are enough."""
    return at_most(t, h + t, 1 - p) < 1 - confidence


def min_passing(t: int, p: float, confidence: float = CONFIDENCE) -> int:
    """h(t): the fewest samples within the bound that, beside t over it, claim the p-th
    percentile (p a fraction, 0 < p < 1) at this confidence."""
    low = max(1, math.floor(t * p / (1 - p)))  # fewer: the expected overs do not exceed t
    step = max(1, low // 8)
    high = low + step
    while not passes(high, t, p, confidence):
        low, step = high + 1, step * 2
        high = low + step
    while low < high:  # least passing h in [low, high]: passing is monotone in h
        mid = (low + high) // 2
        if passes(mid, t, p, confidence):
            high = mid
        else:
            low = mid + 1
    return low


def required_samples(over: int, p: float, confidence: float = CONFIDENCE) -> int:
    """The samples a run with `over` samples over the bound needs: h(over) + over."""
    return min_passing(over, p, confidence) + over


def estimate_rank(n: int, p: float, confidence: float = CONFIDENCE) -> int | None:
    """LoadGen's t for the SingleStream estimate: the largest t >= 1 with n >= h(t) + t
    (the estimate is the t-th largest of n samples); None below h(1) + 1 samples."""
    if n < required_samples(1, p, confidence):
        return None
    # required_samples grows with t, and is at least t / (1 - p): the last t it allows
    low, high = 1, max(1, min(n, math.floor((1 - p) * n)))
    while low < high:
        mid = (low + high + 1) // 2
        if n >= required_samples(mid, p, confidence):
            low = mid
        else:
            high = mid - 1
    return low


@dataclass(frozen=True, slots=True)
class EarlyStopFigures:
    samples: int
    bound_ms: float | None
    over: int | None
    required: int | None
    enough: bool | None
    estimate_ms: float | None
    min_samples: int


def early_stop(
    values: FloatArray, percentile: float, bound_ms: float | None, confidence: float = CONFIDENCE
) -> EarlyStopFigures:
    """One percentile (0 < percentile < 100) of one metric's samples, against `bound_ms`
    (None: no bound is judged, only the estimate)."""
    p = percentile / 100.0
    n = int(values.size)
    rank = estimate_rank(n, p, confidence) if n else None
    estimate = float(np.partition(values, n - rank)[n - rank]) if rank is not None else None
    over = required = None
    enough = None
    if bound_ms is not None:
        over = int(np.count_nonzero(values > bound_ms))
        required = required_samples(over, p, confidence)
        enough = n >= required
    return EarlyStopFigures(
        n, bound_ms, over, required, enough, estimate, required_samples(1, p, confidence)
    )
