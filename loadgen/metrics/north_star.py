"""InferenceX AgentX's North-Star frontier rule over a comparison's points (pure).

Read from SemiAnalysisAI/InferenceX MODELS.md, "North-star Pareto policy" (commit
843c6254ff69), for behaviour only: for a y-axis metric (here throughput per GPU) and a
comparison group, the Pareto frontier against E2E normalized interactivity (p90, the
dashboard's default) is the canonical North-Star frontier; any other view (here
throughput against conventional interactivity, 1/TPOT) shows only the points that are
both on the canonical frontier and non-dominated in that view's own coordinates. So a
configuration cannot reach a published frontier by improving decode cadence at the
expense of the end-to-end delivery rate. A point without the metric (a result file from
before it, or no completed request) takes no part in the canonical frontier, as
InferenceX leaves out runs without per-request traces.

The comparison group is every point of every run compared together (each run one
configuration, each point one concurrency of it): the frontier says which configuration
wins at each operating point.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from loadgen.metrics.compare import Comparison

METRIC = "e2e_norm_intvty_p90"  # compare's key for p90_e2e_norm_intvty


@dataclass(frozen=True, slots=True)
class StarPoint:
    run: str
    conc: int
    e2e_norm_intvty: float | None  # p90, tok/s/user
    interactivity: float | None  # median 1/TPOT, tok/s/user
    throughput: float  # the comparison's throughput field (per GPU when known)


@dataclass(frozen=True, slots=True)
class NorthStar:
    throughput_field: str
    points: tuple[StarPoint, ...]  # every point with a throughput
    canonical: tuple[StarPoint, ...]  # the North-Star frontier, ascending in the metric
    gated: tuple[StarPoint, ...]  # the interactivity view's frontier, gated by it
    dropped: tuple[StarPoint, ...]  # on the interactivity frontier, not North-Star winners
    without_metric: tuple[StarPoint, ...]  # points that cannot take part (no metric)


def non_dominated(
    points: Sequence[StarPoint], x: Callable[[StarPoint], float]
) -> tuple[StarPoint, ...]:
    """The points no other beats in both x and throughput (both higher-is-better),
    ascending in x; of exact duplicates, the first."""
    frontier: list[StarPoint] = []
    best = -math.inf
    for point in sorted(points, key=lambda p: (-x(p), -p.throughput)):
        if point.throughput > best:
            frontier.append(point)
            best = point.throughput
    return tuple(reversed(frontier))


def north_star(comparison: Comparison) -> NorthStar:
    points = tuple(
        StarPoint(row.run, row.conc, row.values[METRIC], row.values["interactivity"], tput)
        for row in comparison.rows
        if (tput := row.values["throughput"]) is not None
    )
    eligible = [p for p in points if p.e2e_norm_intvty is not None]
    canonical = non_dominated(eligible, lambda p: p.e2e_norm_intvty or 0.0)
    winners = {(p.run, p.conc) for p in canonical}
    view = non_dominated(
        [p for p in points if p.interactivity is not None], lambda p: p.interactivity or 0.0
    )
    return NorthStar(
        comparison.throughput_field,
        points,
        canonical,
        tuple(p for p in view if (p.run, p.conc) in winners),
        tuple(p for p in view if (p.run, p.conc) not in winners),
        tuple(p for p in points if p.e2e_norm_intvty is None),
    )
