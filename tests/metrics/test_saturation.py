"""The over-saturation test (metrics/saturation.py) on schedules whose truth is known."""

from __future__ import annotations

import numpy as np
import pytest

from loadgen.metrics.saturation import (
    SaturationRule,
    outstanding_at,
    saturation,
    slope_fit,
)

RULE = SaturationRule(window_s=10.0)


def test_slope_fit_recovers_a_line_and_widens_with_noise() -> None:
    x = np.linspace(0, 10, 50)
    exact = slope_fit(x, 3.0 * x + 1.0)
    assert exact is not None and exact.slope == pytest.approx(3.0) and exact.moe < 1e-9
    rng = np.random.default_rng(1)
    noisy = slope_fit(x, 3.0 * x + rng.normal(0, 5, 50))
    assert noisy is not None and noisy.moe > 0.1 and noisy.lower < noisy.slope
    assert abs(noisy.slope - 3.0) < 2 * noisy.moe  # the interval holds the truth
    assert slope_fit(x[:2], x[:2]) is None and slope_fit(np.ones(5), x[:5]) is None


def test_outstanding_counts_due_minus_finished() -> None:
    due = np.array([0.0, 1.0, 2.0, 3.0])
    finished = np.array([1.5, 2.5])
    grid = np.array([0.5, 1.0, 1.5, 2.0, 3.0])
    assert outstanding_at(grid, due, finished).tolist() == [1, 2, 1, 2, 2]


def _queue(
    arrival_rate: float, service_rate: float, seconds: float, seed: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """A single FIFO server with exponential service: (due, finished, first token, TTFT
    from schedule), the first token half-way through each service."""
    rng = np.random.default_rng(seed)
    due = np.cumsum(rng.exponential(1 / arrival_rate, int(arrival_rate * seconds)))
    free, finished, first, ttft = 0.0, [], [], []
    for t in due:
        begin = max(t, free)
        service = rng.exponential(1 / service_rate)
        free = begin + service
        finished.append(free)
        first.append(begin + service / 2)
        ttft.append(begin + service / 2 - t)
    return due, np.array(finished), np.array(first), np.array(ttft)


def _verdict_at(
    now: float, due: np.ndarray, finished: np.ndarray, first: np.ndarray, ttft: np.ndarray
) -> object:
    done = finished <= now
    seen = first <= now
    return saturation(
        RULE, now, due, np.sort(finished[done]), first[seen & done], ttft[seen & done]
    )


def test_a_queue_fed_twice_its_capacity_is_saturated() -> None:
    due, finished, first, ttft = _queue(20.0, 10.0, 30.0, seed=3)
    verdict = _verdict_at(12.0, due, finished, first, ttft)
    assert verdict is not None
    # outstanding grows at about arrivals - completions = 10/s, the wait by about
    # 1 - completions / arrivals = 0.5 s per s (exponential service: loose bounds)
    assert 5 < verdict.outstanding.slope < 15  # type: ignore[attr-defined]
    assert 0.1 < verdict.ttft.slope < 0.9  # type: ignore[attr-defined]
    assert "over-saturated" in verdict.detail  # type: ignore[attr-defined]


@pytest.mark.parametrize("seed", range(20))
def test_a_queue_at_half_its_capacity_never_is(seed: int) -> None:
    due, finished, first, ttft = _queue(10.0, 20.0, 60.0, seed=seed)
    for now in np.arange(10.0, 60.0, 0.5):  # every check a live point would make
        assert _verdict_at(float(now), due, finished, first, ttft) is None


def test_no_verdict_before_a_whole_window() -> None:
    due, finished, first, ttft = _queue(40.0, 10.0, 30.0, seed=4)
    assert _verdict_at(9.9, due, finished, first, ttft) is None
    assert _verdict_at(10.5, due, finished, first, ttft) is not None


def test_both_slopes_must_grow() -> None:
    """A slow but stable server (TTFT high and flat) and a queue of requests whose TTFT does
    not grow are not saturated; only both growing together are."""
    due = np.arange(0, 20, 0.05)
    finished = due + 5.0  # stable: each takes 5 s, outstanding flat at 100
    first = due + 4.0
    assert (
        saturation(
            RULE,
            15.0,
            due,
            finished[finished <= 15],
            first[first <= 15],
            np.full(int((first <= 15).sum()), 4.0),
        )
        is None
    )
    growing_ttft = (first - due) + 0.5 * first  # TTFT grows, outstanding does not
    assert (
        saturation(
            RULE, 15.0, due, finished[finished <= 15], first[first <= 15], growing_ttft[first <= 15]
        )
        is None
    )
