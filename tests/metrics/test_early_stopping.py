"""MLPerf LoadGen's early-stopping rule (metrics/early_stopping.py) against an independent
implementation: the binomial CDF summed exactly in integers (math.comb's recurrence, no
floating point), with LoadGen's confidence 0.99, i.e. "at most t over" must be less
likely than 1/100. LoadGen's rule read from mlcommons/inference loadgen/early_stopping.cc
and results.cc at commit b66003e10e2d."""

from __future__ import annotations

from fractions import Fraction

import numpy as np
import pytest

from loadgen.metrics.early_stopping import (
    early_stop,
    estimate_rank,
    min_passing,
    required_samples,
)
from loadgen.metrics.summary import PointContext, summarize
from loadgen.metrics.trust import point_warnings
from loadgen.results.point import flat_fields
from tests.support.fake_records import MS, full_point, make_record

PERCENTILES = (Fraction(9, 10), Fraction(99, 100), Fraction(999, 1000))


def exact_passes(h: int, t: int, p: Fraction) -> bool:
    """P(X <= t) < 1/100 for X ~ Binomial(h + t, 1 - p), in exact integer arithmetic:
    sum_k C(n, k) a^k b^(n-k) / d^n with 1 - p = a/d, p = b/d."""
    n = h + t
    a, d = (1 - p).numerator, (1 - p).denominator
    b = p.numerator * (d // p.denominator)
    term = b**n  # k = 0: C(n, 0) a^0 b^n
    total = term
    for k in range(t):  # term(k+1) = term(k) (n-k)/(k+1) a/b, an integer each step
        term = term * (n - k) * a // ((k + 1) * b)
        total += term
    return bool(total * 100 < d**n)


@pytest.mark.parametrize("p", PERCENTILES, ids=str)
@pytest.mark.parametrize("t", [0, 1, 2, 5, 13, 40])
def test_min_passing_is_the_least_passing_count(p: Fraction, t: int) -> None:
    h = min_passing(t, float(p))
    assert exact_passes(h, t, p)
    assert h == 1 or not exact_passes(h - 1, t, p)


@pytest.mark.parametrize("n", [100, 250, 1_000, 5_000, 20_000, 100_000])
@pytest.mark.parametrize("p", PERCENTILES, ids=str)
def test_enough_samples_equals_the_exact_rule(n: int, p: Fraction) -> None:
    # counts over the bound around where the claim flips (about (1 - p) n), and 0..3
    expected_over = float(1 - p) * n
    counts = sorted(
        {0, 1, 2, 3}
        | {max(0, int(expected_over * f)) for f in (0.25, 0.5, 0.7, 0.8, 0.9, 1.0, 1.2)}
    )
    for over in counts:
        if over >= n:
            continue
        enough = n >= required_samples(over, float(p))
        assert enough == exact_passes(n - over, over, p), (n, over)


def test_the_662_sample_floor_for_p99() -> None:
    assert min_passing(0, 0.99) == 459  # Server: none over any bound
    assert required_samples(1, 0.99) == 662  # SingleStream: the estimate needs 662
    assert exact_passes(661, 1, Fraction(99, 100)) and not exact_passes(660, 1, Fraction(99, 100))
    rng = np.random.default_rng(1)
    few, enough = rng.exponential(size=661), rng.exponential(size=662)
    assert early_stop(few, 99, None).estimate_ms is None
    claim = early_stop(enough, 99, None)
    assert claim.estimate_ms == enough.max() and claim.min_samples == 662


@pytest.mark.parametrize("n", [700, 1_000, 3_000])
def test_the_estimate_rank_is_loadgens_scan(n: int) -> None:
    # results.cc: for i = 2.. while n >= h(i) + i; t = the last i that held
    p = Fraction(99, 100)
    t = 1
    for i in range(2, n + 1):
        h = 1
        while not exact_passes(h, i, p):  # h(i), found by the exact rule alone
            h = h * 2
        low, high = h // 2, h
        while low < high:
            mid = (low + high) // 2
            low, high = (low, mid) if exact_passes(mid, i, p) else (mid + 1, high)
        if n < low + i:
            break
        t = i
    assert estimate_rank(n, 0.99) == t
    values = np.arange(n, dtype=np.float64)
    assert early_stop(values, 99, None).estimate_ms == n - t  # the t-th largest


def test_a_bound_counts_samples_strictly_over_it() -> None:
    values = np.array([1.0] * 900 + [5.0] * 3 + [2.0] * 97)
    figures = early_stop(values, 99, 2.0)
    assert figures.over == 3 and figures.samples == 1000
    assert figures.required == required_samples(3, 0.99)
    assert figures.enough == (figures.required <= 1000)


def test_a_percentile_under_an_slo_on_too_few_samples_is_a_warning() -> None:

    records = [make_record(i, offsets_ns=((5 + i % 7) * MS, 30 * MS)) for i in range(200)]
    ctx = PointContext(conc=4, input_len=100, output_len=8, slos={"ttft": 100.0})
    result = flat_fields(summarize(records, ctx))
    entry = result["early_stopping"]["p99_ttft_ms"]
    assert entry["bound_source"] == "slo" and entry["over"] == 0
    assert entry["required_samples"] == 459 and entry["enough"] is False
    assert entry["estimate_ms"] is None and entry["min_samples_for_estimate"] == 662
    assert result["early_stopping"]["p90_ttft_ms"]["enough"] is True  # 200 >= h(0) = 44
    warned = [w for w in point_warnings(full_point(records, ctx)) if "early stopping" in w]
    assert len(warned) == 2 and warned[0].startswith("p99_ttft_ms: 200 samples, 0 over")
    unbound = flat_fields(summarize(records, PointContext(4, 100, 8)))
    assert unbound["early_stopping"]["p99_ttft_ms"]["bound_source"] == "percentile"
    unbound_point = full_point(records, PointContext(4, 100, 8))
    assert not [w for w in point_warnings(unbound_point) if "early stopping" in w]
