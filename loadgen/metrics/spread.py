"""How much a figure moves between repeated trials of one point (pure, no I/O).

The building block for `--trials N` (issue 24, item 1): each trial gives one value of a
headline figure (a p99 TTFT, an output throughput), and this says how far their mean can
be trusted. The interval is Student's t on the trial values: each trial's figure is itself
an average over many requests, so the values are close to normal, while their standard
deviation is estimated from the same few trials -- a normal (z) interval would be too
narrow at the N of 3-10 trials people run, and a bootstrap over so few values cannot reach
its nominal coverage. With N < 5 the t quantile is large (12.7 at N=2, 3.18 at N=4), so
the interval is wide; `wide` says so.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

# Student t 0.975 quantiles (two-sided 95 %) for 1..30 degrees of freedom.
_T975 = (
    12.7062,
    4.3027,
    3.1824,
    2.7764,
    2.5706,
    2.4469,
    2.3646,
    2.3060,
    2.2622,
    2.2281,
    2.2010,
    2.1788,
    2.1604,
    2.1448,
    2.1314,
    2.1199,
    2.1098,
    2.1009,
    2.0930,
    2.0860,
    2.0796,
    2.0739,
    2.0687,
    2.0639,
    2.0595,
    2.0555,
    2.0518,
    2.0484,
    2.0452,
    2.0423,
)
_Z975 = 1.959963984540054
FEW_TRIALS = 5  # below this the interval is flagged wide


def t975(df: int) -> float:
    """The 0.975 quantile of Student's t: the table to 30 df, Cornish-Fisher beyond
    (error < 1e-4 there), so no scipy is needed for one number."""
    if df < 1:
        raise ValueError(f"degrees of freedom must be at least 1, got {df}")
    if df <= len(_T975):
        return _T975[df - 1]
    z = _Z975
    return (
        z
        + (z**3 + z) / (4 * df)
        + (5 * z**5 + 16 * z**3 + 3 * z) / (96 * df**2)
        + (3 * z**7 + 19 * z**5 + 17 * z**3 - 15 * z) / (384 * df**3)
    )


@dataclass(frozen=True, slots=True)
class Spread:
    """One figure over N trials. std is the sample std (ddof=1), the one the t interval
    uses; cv = std / mean (None when the mean is 0); ci_* None below 2 trials."""

    n: int
    mean: float
    std: float | None
    cv: float | None
    ci_low: float | None
    ci_high: float | None
    wide: bool  # N < FEW_TRIALS: the interval is honest but wide


def spread(values: Sequence[float]) -> Spread:
    """Mean, std, CV and the 95 % Student-t interval of the mean of `values`."""
    n = len(values)
    if n == 0:
        raise ValueError("spread needs at least one trial value")
    mean = math.fsum(values) / n
    if n == 1:
        return Spread(n, mean, None, None, None, None, wide=True)
    std = math.sqrt(math.fsum((v - mean) ** 2 for v in values) / (n - 1))
    half = t975(n - 1) * std / math.sqrt(n)
    cv = std / abs(mean) if mean else None
    return Spread(n, mean, std, cv, mean - half, mean + half, wide=n < FEW_TRIALS)


def within_noise(a: Spread, b: Spread) -> bool | None:
    """True when the two 95 % intervals overlap (a difference not shown by the trials);
    None when either has no interval. Overlap is the conservative reading: intervals that
    touch can still differ at 95 %, but intervals apart certainly do."""
    if a.ci_low is None or a.ci_high is None or b.ci_low is None or b.ci_high is None:
        return None
    return a.ci_low <= b.ci_high and b.ci_low <= a.ci_high
