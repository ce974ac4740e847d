"""The trial-spread statistics: the interval covers the true mean at its promised rate."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.metrics.spread import spread, t975, within_noise


def test_t_quantile_matches_known_values_and_is_continuous_past_the_table() -> None:
    assert t975(1) == pytest.approx(12.7062) and t975(4) == pytest.approx(2.7764)
    assert t975(60) == pytest.approx(2.0003, abs=2e-4)
    assert t975(120) == pytest.approx(1.9799, abs=2e-4)
    assert t975(31) == pytest.approx(2.0395, abs=2e-4)  # first value off the table
    with pytest.raises(ValueError, match="at least 1"):
        t975(0)


def test_spread_of_known_values() -> None:
    s = spread([10.0, 12.0, 14.0])
    assert s.mean == 12.0 and s.std == pytest.approx(2.0) and s.cv == pytest.approx(2 / 12)
    half = 4.3027 * 2.0 / np.sqrt(3)
    assert s.ci_low == pytest.approx(12 - half) and s.ci_high == pytest.approx(12 + half)
    assert s.wide and not spread([1.0, 2.0, 3.0, 4.0, 5.0]).wide
    one = spread([7.0])
    assert one.ci_low is None and one.std is None and within_noise(one, s) is None


@pytest.mark.parametrize("n", [3, 5, 10])
def test_the_interval_covers_the_true_mean_95_percent_of_the_time(n: int) -> None:
    """4000 seeded repetitions of n normal trials: coverage within 1.5 points of 95 %
    (the binomial sd of the estimate is 0.34 points), at small n where z would fail."""
    rng = np.random.default_rng(24)
    draws = rng.normal(100.0, 7.0, size=(4000, n))
    hits = 0
    for row in draws:
        s = spread(row.tolist())
        assert s.ci_low is not None and s.ci_high is not None
        hits += s.ci_low <= 100.0 <= s.ci_high
    assert abs(hits / 4000 - 0.95) < 0.015


def test_within_noise_is_overlap_of_the_intervals() -> None:
    a, b = spread([10.0, 11.0, 12.0]), spread([11.5, 12.5, 13.5])
    far = spread([30.0, 31.0, 32.0])
    assert within_noise(a, b) is True and within_noise(a, far) is False
