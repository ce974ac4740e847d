"""The order-statistic interval of a percentile (metrics/precision.py) against the textbook
construction in exact arithmetic (Fractions, math.comb), and the bound a stopped point
publishes once its requests in flight end."""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest

from loadgen.metrics.precision import order_ranks, percentile_interval, worst_relative


def exact_ranks(n: int, p: Fraction, confidence: Fraction) -> tuple[int, int] | None:
    cdf, total = [], Fraction(0)
    for k in range(n + 1):
        total += math.comb(n, k) * p**k * (1 - p) ** (n - k)
        cdf.append(total)
    miss = (1 - confidence) / 2
    lows = [r for r in range(1, n + 1) if cdf[r - 1] <= miss]
    highs = [r for r in range(1, n + 1) if cdf[r - 1] >= 1 - miss]
    return (max(lows), min(highs)) if lows and highs else None


@pytest.mark.parametrize("n", [5, 20, 37, 100, 366, 367, 500])
@pytest.mark.parametrize("p", [Fraction(1, 2), Fraction(9, 10), Fraction(99, 100)], ids=str)
def test_ranks_are_the_exact_construction(n: int, p: Fraction) -> None:
    assert order_ranks(n, float(p)) == exact_ranks(n, p, Fraction(95, 100))


def test_median_of_100_is_the_40th_to_61st() -> None:  # the textbook table's row
    assert order_ranks(100, 0.5) == (40, 61)
    values = np.arange(1.0, 101.0)
    interval = percentile_interval(values, 50)
    assert interval is not None and (interval.low, interval.high) == (40.0, 61.0)
    assert interval.value == 50.5 and interval.coverage >= 0.95


@pytest.mark.parametrize("seed", range(20))
def test_the_worst_case_bounds_what_any_later_samples_give(seed: int) -> None:
    rng = np.random.default_rng(seed)
    values = rng.lognormal(2.0, 0.3, size=int(rng.integers(200, 2000)))
    extra = int(rng.integers(1, 16))
    bound = worst_relative(values, 90, extra)
    assert bound >= percentile_interval(values, 90).relative  # type: ignore[union-attr]
    for _ in range(30):  # later samples anywhere: below, inside, far above, or none
        m = int(rng.integers(0, extra + 1))
        later = rng.choice([0.001, 1e6, float(np.median(values))], size=m)
        final = percentile_interval(np.concatenate([values, later]), 90)
        assert final is not None and final.relative <= bound
