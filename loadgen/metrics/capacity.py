"""The capacity search of `--find-max` (pure: no I/O; orchestrate/capacity.py measures).

The question: the largest concurrency (or request rate) whose point meets every
objective (`ttft:p99 <= 2 s`, ...), between two bounds. Each measured point is a probe;
its margin is the worst objective's bound / limit - 1 (<= 0: every objective met). The
search, as vLLM's `bench sweep serve_sla` does it: measure the upper bound (meets all:
that is the answer), then the lower (fails: there is none), then repeatedly interpolate
the margin linearly (monotone) between the last passing and the first failing probe to
where it crosses 0, and measure there; stop when the two are within the resolution.
The interpolated load is kept at least a quarter of the bracket from either end, and after
two probes in a row on the same side of the answer the next one halves the bracket
(a margin far from linear, such as a cliff, would otherwise creep up on it one end at a
time), so the search needs about log2 of the range's probes at worst.
A point stopped over-saturated (or otherwise before its end) fails whatever its figures.
A point that passes above one that failed (noise, or a load the server handles
non-monotonically) does not move the answer above the first failure; it is flagged.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from loadgen.config.objectives import Objective, Resolution

QUARTER = 0.25  # the interpolated probe's least distance from the bracket's ends


@dataclass(frozen=True, slots=True)
class Check:
    """One objective at one probe. `bound` is what is held to the limit: the point's
    value, or with --trials the upper end of its 95 % interval over the trials."""

    objective: str  # `ttft:p99`
    value: float | None  # the point's (pooled) figure, ms
    bound: float | None
    limit_ms: float

    @property
    def margin(self) -> float:
        """bound / limit - 1: <= 0 met; a missing figure fails (inf)."""
        return math.inf if self.bound is None else self.bound / self.limit_ms - 1

    @property
    def passed(self) -> bool:
        return self.margin <= 0


@dataclass(frozen=True, slots=True)
class Probe:
    load: float  # a concurrency, or requests/s
    checks: tuple[Check, ...]
    complete: bool = True  # a point that did not run to its end fails
    # why it did not: `saturated` (the over-saturation stop: the server cannot keep up
    # with this load, so the load fails, as any objective missed), else the point's own
    stop_reason: str | None = None

    @property
    def passed(self) -> bool:
        return self.complete and all(c.passed for c in self.checks)

    @property
    def margin(self) -> float:
        return max(c.margin for c in self.checks) if self.complete else math.inf

    @property
    def binding(self) -> Check:
        """The objective closest to (or furthest past) its limit."""
        return max(self.checks, key=lambda c: c.margin)

    @property
    def failed_because(self) -> str | None:
        """`saturated` or `incomplete` when the point itself fails; None otherwise."""
        if self.complete:
            return None
        return "saturated" if self.stop_reason == "saturated" else "incomplete"


def checks_of(
    objectives: Sequence[Objective], figures: Mapping[str, tuple[float | None, float | None]]
) -> tuple[Check, ...]:
    """Each objective's check from `figures`: objective name -> (value, bound)."""
    return tuple(Check(o.name, *figures.get(o.name, (None, None)), o.limit_ms) for o in objectives)


@dataclass(frozen=True, slots=True)
class Answer:
    load: float | None  # None: even the lower bound fails
    last_pass: Probe | None
    first_fail: Probe | None  # None: the upper bound passes
    # the objective that stops the load growing (or the tightest); `saturated` or
    # `incomplete` when the first failing probe's point itself failed
    binding: str | None
    non_monotone: tuple[float, ...]  # loads that passed above the first failure


@dataclass(frozen=True, slots=True)
class Search:
    low: float
    high: float
    resolution: Resolution
    integer: bool  # concurrency: whole numbers only

    def next_load(self, probes: Sequence[Probe]) -> float | None:
        """The load to measure next, None when the answer is known."""
        by_load = {p.load: p for p in probes}
        if self.high not in by_load:
            return self.high
        if by_load[self.high].passed:
            return None
        if self.low not in by_load:
            return self.low
        if not by_load[self.low].passed:
            return None
        passed, failed = self._bracket(probes)
        if self.close(passed.load, failed.load):
            return None
        # two interpolated probes in a row on one side: the margin is far from linear
        # there (a cliff), so halve the bracket instead
        recent = probes[2:][-2:]
        one_sided = len(recent) == 2 and recent[0].passed == recent[1].passed
        return self._between(passed, failed, bisect=one_sided)

    def close(self, passed: float, failed: float) -> bool:
        width = failed - passed
        if self.integer and width <= 1:
            return True
        step = self.resolution.value * passed if self.resolution.relative else self.resolution.value
        return width <= step

    def _bracket(self, probes: Sequence[Probe]) -> tuple[Probe, Probe]:
        failed = min((p for p in probes if not p.passed), key=lambda p: p.load)
        passed = max((p for p in probes if p.passed and p.load < failed.load), key=lambda p: p.load)
        return passed, failed

    def _between(self, passed: Probe, failed: Probe, *, bisect: bool) -> float:
        low, high = passed.load, failed.load
        width = high - low
        m_low, m_high = passed.margin, failed.margin
        interpolate = not bisect and math.isfinite(m_high) and m_high > m_low
        # no figure at the fail (nothing completed): no margin to interpolate, bisect
        guess = low + width * (-m_low) / (m_high - m_low) if interpolate else low + width / 2
        guess = min(max(guess, low + QUARTER * width), high - QUARTER * width)
        if not self.integer:
            return guess
        return float(min(max(math.floor(guess), int(low) + 1), int(high) - 1))

    def answer(self, probes: Sequence[Probe]) -> Answer:
        if not probes:
            return Answer(None, None, None, None, ())
        failing = [p for p in probes if not p.passed]
        if not failing:
            best = max(probes, key=lambda p: p.load)
            return Answer(best.load, best, None, best.binding.objective, ())
        failed = min(failing, key=lambda p: p.load)
        below = [p for p in probes if p.passed and p.load < failed.load]
        passed = max(below, key=lambda p: p.load) if below else None
        above = tuple(sorted(p.load for p in probes if p.passed and p.load > failed.load))
        # a saturated first failure is bound by the server's throughput, not an objective
        binding = failed.failed_because or failed.binding.objective
        return Answer(passed.load if passed else None, passed, failed, binding, above)

    def brute_force_points(self) -> int | None:
        """How many points a sweep of every concurrency in the range would measure."""
        return int(self.high - self.low) + 1 if self.integer else None
