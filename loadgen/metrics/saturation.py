"""Is an open-loop point over-saturated? A slope test over a sliding window (pure, no I/O).

An open loop sends at its rate whatever the server does; when the server completes fewer
requests per second than arrive, the requests outstanding (due and not finished, whether
waiting for a client slot or queued in the server) grow without bound, and so does the
TTFT counted from each request's intended send time. Such a point measures the length of
a queue that depends only on how long it ran, not the server: it is stopped early
(`stop_reason: saturated`).

The test (docs/results.md, "Over-saturation stop"), over the last `window_s` seconds:

- outstanding(t), sampled every `grid_s` from the arrival and finish times, is fitted by
  least squares; the server falls behind when the slope's lower 95 % bound (slope minus
  the Student-t margin of error) exceeds `margin` x the arrival rate (the schedule's over
  the window): completions are short of arrivals by more than that share, with
  confidence.
- TTFT from the schedule of the requests whose first token came in the window, against
  that first token's time: when a server completes requests at mu per second while they
  arrive at lambda, each first token comes 1 / mu after the previous one and its request
  arrived 1 / lambda after the previous request, so the wait grows by 1 - mu / lambda
  seconds per second -- the same share of arrivals left unserved as the outstanding
  slope's. Its lower bound must exceed `margin` (s/s) too.

Both must hold, with at least `min_samples` points in each fit, and not before a whole
window of the measured phase has passed (ramp-in). A single threshold (TTFT above X)
would call a slow but stable server saturated; a slope alone, without the margin, would
stop a stable server whose queue happens to grow for a few seconds (the samples of a
queue length are correlated, so the t margin alone is too narrow).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadgen.metrics.spread import t975

Floats = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class SaturationRule:
    window_s: float = 30.0  # fit the last this many seconds; no verdict before one window
    margin: float = 0.05  # slopes' lower bounds must exceed this (share of rate; s/s)
    min_samples: int = 10  # points per fit, at least
    grid_s: float = 0.1  # outstanding sampled this often


@dataclass(frozen=True, slots=True)
class SlopeFit:
    slope: float
    moe: float  # Student-t 95 % margin of error of the slope
    n: int

    @property
    def lower(self) -> float:
        return self.slope - self.moe


@dataclass(frozen=True, slots=True)
class Saturation:
    """The evidence of a saturated point (both fits), and the line printed about it."""

    outstanding: SlopeFit  # requests/s
    ttft: SlopeFit  # s/s
    rate: float  # the schedule's arrivals over the window
    at_s: float  # seconds into the measured phase
    window_s: float

    @property
    def detail(self) -> str:
        o, t = self.outstanding, self.ttft
        return (
            f"over-saturated {self.at_s:.1f} s into the point: over the last "
            f"{self.window_s:g} s requests outstanding grew {o.slope:.1f}±{o.moe:.1f}/s "
            f"at {self.rate:.3g} req/s arrivals and TTFT from schedule "
            f"{t.slope * 1e3:.0f}±{t.moe * 1e3:.0f} ms/s"
        )


def slope_fit(x: Floats, y: Floats) -> SlopeFit | None:
    """Least-squares slope of y on x with its 95 % margin of error (None: under 3 points
    or x constant)."""
    n = len(x)
    if n < 3:
        return None
    dx = x - x.mean()
    sxx = float(dx @ dx)
    if sxx <= 0:
        return None
    slope = float(dx @ (y - y.mean())) / sxx
    resid = y - y.mean() - slope * dx
    se = math.sqrt(float(resid @ resid) / (n - 2) / sxx)
    return SlopeFit(slope, t975(n - 2) * se, n)


def outstanding_at(grid: Floats, due_s: Floats, finished_s: Floats) -> Floats:
    """Requests due by each grid time and not finished by then (both inputs sorted)."""
    due = np.searchsorted(due_s, grid, side="right")
    done = np.searchsorted(finished_s, grid, side="right")
    return (due - done).astype(np.float64)


def saturation(
    rule: SaturationRule,
    now_s: float,
    due_s: Floats,
    finished_s: Floats,
    first_token_s: Floats,
    ttft_s: Floats,
) -> Saturation | None:
    """The verdict at `now_s` (seconds into the measured phase): the evidence when the point
    is over-saturated, else None. Times are seconds from the measured phase's start;
    `due_s` and `finished_s` sorted; `ttft_s[i]` is the TTFT from schedule of the request
    whose first token came at `first_token_s[i]`. The arrival rate is the one the schedule
    had over the window (a ramp's too)."""
    if now_s < rule.window_s:
        return None
    start = now_s - rule.window_s
    arrived = np.searchsorted(due_s, now_s, side="right") - np.searchsorted(due_s, start)
    rate = float(arrived) / rule.window_s
    if rate <= 0:
        return None
    grid = np.arange(start, now_s, rule.grid_s, dtype=np.float64)
    outstanding = slope_fit(grid, outstanding_at(grid, due_s, finished_s))
    recent = first_token_s >= start
    if int(recent.sum()) < rule.min_samples or len(grid) < rule.min_samples:
        return None
    ttft = slope_fit(first_token_s[recent], ttft_s[recent])
    if outstanding is None or ttft is None:
        return None
    if outstanding.lower > rule.margin * rate and ttft.lower > rule.margin:
        return Saturation(outstanding, ttft, rate, now_s, rule.window_s)
    return None
