"""Disaggregated lanes side by side (`loadgen compare`, the report): at each concurrency,
each lane's TTFT taken apart and its per-role server figures, and which lane wins on
throughput and on TTFT (pure).

A lane is in it when any of its points has `ttft_parts` or `server_metrics_by_role`
(`--server-metrics ROLE=URL`). The winners are judged over the lanes whose point at that
concurrency is complete: throughput as the comparison's (per GPU when every point has
it), TTFT as the client's mean, the figure the parts add up to. A lane ahead by less
than TIE_SHARE is no winner: the point figures of one run cannot tell such a gap from
noise (run --trials for an interval).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import TypeGuard

from loadgen.results.point import PointResult

TIE_SHARE = 0.02  # a lead under 2 % of the runner-up's figure is called a tie
PART_NAMES = ("frontend", "prefill_queue", "prefill", "kv_transfer", "decode_first", "unexplained")


@dataclass(frozen=True, slots=True)
class LanePoint:
    """One lane at one concurrency."""

    run: str
    conc: int
    parts: Mapping[str, float | None]  # part -> mean ms (TtftParts.means); {} without parts
    parts_verdict: str | None  # whether they add up to the client's TTFT, and the bound
    client_mean_ttft_ms: float | None
    roles: Mapping[str, Mapping[str, float | None]]  # role -> ServerRoleFigures.figures()


@dataclass(frozen=True, slots=True)
class Winner:
    conc: int
    quantity: str  # "throughput" or "mean TTFT"
    run: str | None  # None: a tie, or fewer than two lanes measured it
    sentence: str


@dataclass(frozen=True, slots=True)
class DisaggComparison:
    runs: tuple[str, ...]  # the lanes with role figures or TTFT parts, in the runs' order
    concs: tuple[int, ...]
    lanes: tuple[LanePoint, ...]  # by concurrency, then run order
    winners: tuple[Winner, ...]  # by concurrency: throughput, then TTFT

    def lanes_at(self, conc: int) -> list[LanePoint]:
        return [lane for lane in self.lanes if lane.conc == conc]

    def winners_at(self, conc: int) -> list[Winner]:
        return [w for w in self.winners if w.conc == conc]


def lane_point(run: str, conc: int, point: PointResult) -> LanePoint:
    parts = point.ttft_parts
    return LanePoint(
        run,
        conc,
        parts.means() if parts is not None else {},
        parts.verdict if parts is not None else None,
        parts.client_mean_ttft_ms if parts is not None else None,
        {row.role: row.figures() for row in point.server_metrics_by_role or ()},
    )


def _measured(value: float | None) -> TypeGuard[float]:
    return value is not None and math.isfinite(value)


def winner(
    conc: int, quantity: str, figures: Sequence[tuple[str, float]], *, higher: bool, unit: str
) -> Winner:
    """The lane ahead on `quantity` among (run, figure), with its lead over the next."""
    if len(figures) < 2:
        measured = figures[0][0] if figures else "no lane"
        return Winner(conc, quantity, None, f"conc {conc}: {quantity}: only {measured} measured")
    ranked = sorted(figures, key=lambda f: f[1], reverse=higher)
    (best, value), (second, other) = ranked[0], ranked[1]
    lead = abs(value - other) / other if other else None
    shown = f"{best} {value:,.1f} {unit} vs {second} {other:,.1f}"
    if lead is not None and lead < TIE_SHARE:
        return Winner(
            conc,
            quantity,
            None,
            f"conc {conc}: {quantity}: no winner, {shown} (within {TIE_SHARE:.0%})",
        )
    ahead = "" if lead is None else f" ({lead:.0%} {'more' if higher else 'less'})"
    return Winner(conc, quantity, best, f"conc {conc}: {quantity}: {best} wins, {shown}{ahead}")


def disagg_comparison(
    points: Mapping[str, Mapping[int, PointResult]],
    throughput_field: str,
    throughput: Callable[[PointResult], float | None],
) -> DisaggComparison | None:
    """`points`: run -> concurrency -> its point, in the runs' order; `throughput` reads
    the comparison's throughput (`throughput_field`); None when no lane has TTFT parts or
    role figures."""
    lanes = {
        run: {conc: lane_point(run, conc, p) for conc, p in sorted(by_conc.items())}
        for run, by_conc in points.items()
    }
    runs = tuple(
        run for run, by_conc in lanes.items() if any(x.parts or x.roles for x in by_conc.values())
    )
    if not runs:
        return None
    concs = tuple(sorted({c for run in runs for c in points[run]}))
    winners = []
    for conc in concs:
        complete = [
            (run, points[run][conc])
            for run in runs
            if conc in points[run] and points[run][conc].status.complete
        ]
        rates = [(run, v) for run, p in complete if _measured(v := throughput(p))]
        ttft = [(run, v) for run, p in complete if _measured(v := p.metrics.mean_ttft_ms)]
        unit = "tok/s/GPU" if throughput_field.endswith("_per_gpu") else "tok/s"
        winners.append(winner(conc, "throughput", rates, higher=True, unit=unit))
        winners.append(winner(conc, "mean TTFT", ttft, higher=False, unit="ms"))
    ordered = tuple(lanes[run][conc] for conc in concs for run in runs if conc in lanes[run])
    return DisaggComparison(runs, concs, ordered, tuple(winners))
