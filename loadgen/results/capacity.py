"""capacity.json: what `--find-max` found (orchestrate/capacity.py; docs/capacity.md).

Written after every probe, so a search that stops keeps what it measured; the fields are
documented in docs/results.md, "Capacity search".
"""

from __future__ import annotations

import msgspec


class CapacityCheck(msgspec.Struct, frozen=True, kw_only=True):
    objective: str  # `ttft:p99`
    value_ms: float | None  # the probe point's figure (pooled over --trials)
    bound_ms: float | None  # what is held to the limit: the value, or its CI's upper end
    limit_ms: float
    margin: float | None  # bound / limit - 1 (<= 0: met); null: no figure (failed)
    passed: bool


class CapacityProbe(msgspec.Struct, frozen=True, kw_only=True):
    load: float  # the concurrency, or requests/s
    passed: bool
    complete: bool  # the point ran to its end (an incomplete one fails)
    # why the point itself failed: `saturated` (stopped over-saturated), `incomplete`
    # (stopped otherwise); null: it ran to its end (it passes or fails on its checks)
    failed_because: str | None = None
    margin: float | None  # the worst objective's
    binding_objective: str  # the objective closest to (or furthest past) its limit
    results: str  # the probe's own results directory, relative to this file's
    checks: list[CapacityCheck]


class CapacityObjective(msgspec.Struct, frozen=True, kw_only=True):
    objective: str
    field: str  # the point result field it reads
    limit_ms: float


class CapacityResult(msgspec.Struct, frozen=True, kw_only=True):
    find_max: str  # conc | rate
    objectives: list[CapacityObjective]
    low: float
    high: float
    resolution: str  # `1` (a step) or `5%` (of the last passing load)
    trials: int
    held_to_limit: str  # `value`, or `ci95_high` with --trials
    finished: bool  # false: the search stopped before its answer was known
    answer: float | None  # the largest load meeting every objective; null: none does
    last_pass: CapacityProbe | None
    first_fail: CapacityProbe | None  # null: the upper bound meets every objective
    binding_objective: str | None
    non_monotone: list[float]  # loads that passed above the first failure (flagged)
    probes: list[CapacityProbe]  # in the order measured
    brute_force_points: int | None  # conc: the points a sweep of every conc would measure
