"""The report's view of a `--find-max` search (capacity.json, docs/capacity.md):
its probes and answer on the throughput-interactivity figure, and one line of text.

Each probe is drawn at its own point's median interactivity and throughput (the field
the comparison uses); a probe stopped before any request completed has no figures and
is only in the text.
"""

from __future__ import annotations

import html
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from loadgen.metrics.compare import THROUGHPUT, finite
from loadgen.results.capacity import CapacityProbe, CapacityResult
from loadgen.results.point import PointResult

if TYPE_CHECKING:
    from matplotlib.axes import Axes


@dataclass(frozen=True, slots=True)
class ProbeMark:
    load: float
    interactivity: float
    throughput: float
    passed: bool
    answer: bool  # this probe's load is the search's answer


@dataclass(frozen=True, slots=True)
class CapacityOverlay:
    run: str
    binding: str | None
    marks: tuple[ProbeMark, ...]


def overlay(
    run: str,
    capacity: CapacityResult,
    probe_points: Mapping[float, PointResult],
    throughput_field: str,
) -> CapacityOverlay:
    """The probes with both figures; probe_points: load -> the probe's point."""
    marks = []
    for probe in capacity.probes:
        point = probe_points.get(probe.load)
        if point is None:
            continue
        x = finite(point.metrics.median_interactivity_tok_s_user)
        y = finite(THROUGHPUT[throughput_field](point))
        if x is not None and y is not None:
            marks.append(ProbeMark(probe.load, x, y, probe.passed, probe.load == capacity.answer))
    return CapacityOverlay(run, capacity.binding_objective, tuple(marks))


def _load(capacity: CapacityResult, load: float) -> str:
    return f"conc {load:g}" if capacity.find_max == "conc" else f"{load:g} req/s"


def _probe(capacity: CapacityResult, probe: CapacityProbe | None) -> str:
    if probe is None:
        return "none"
    why = f" ({probe.failed_because})" if probe.failed_because else ""
    return _load(capacity, probe.load) + why


def capacity_line(run: str, capacity: CapacityResult) -> str:
    """`run: find-max conc: answer conc 4 (last pass conc 4, first fail conc 5);
    binding objective ttft:p99; 4 probes (a sweep of every conc measures 8)`."""
    answer = "none" if capacity.answer is None else _load(capacity, capacity.answer)
    line = (
        f"{run}: find-max {capacity.find_max}: answer {answer} "
        f"(last pass {_probe(capacity, capacity.last_pass)}, "
        f"first fail {_probe(capacity, capacity.first_fail)}); "
        f"binding objective {capacity.binding_objective or 'none'}; "
        f"{len(capacity.probes)} probes"
    )
    if capacity.brute_force_points is not None:
        line += f" (a sweep of every conc measures {capacity.brute_force_points})"
    if not capacity.finished:
        line += "; the search stopped before its answer was known"
    if capacity.non_monotone:
        line += "; passed above the first failure: " + ", ".join(
            f"{v:g}" for v in capacity.non_monotone
        )
    return line


def capacity_text(searches: Sequence[tuple[str, CapacityResult]]) -> str:
    """One <p class="capacity"> per search, under the figure."""
    return "".join(
        f'<p class="capacity" data-run="{html.escape(run, quote=True)}">'
        f"{html.escape(capacity_line(run, capacity))}</p>"
        for run, capacity in searches
    )


def draw_overlay(axes: Axes, search: CapacityOverlay, colour: str) -> None:
    """Passing probes as hollow circles, failing ones as crosses, the answer as a star;
    the legend names the binding objective."""
    passed = [m for m in search.marks if m.passed]
    failed = [m for m in search.marks if not m.passed]
    if passed:
        axes.scatter(
            [m.interactivity for m in passed],
            [m.throughput for m in passed],
            s=90,
            facecolors="none",
            edgecolors=colour,
            linewidths=1.6,
            zorder=4,
            label=f"{search.run}: probe meets every objective",
        )
    if failed:
        axes.scatter(
            [m.interactivity for m in failed],
            [m.throughput for m in failed],
            s=80,
            marker="x",
            color=colour,
            linewidths=2,
            zorder=4,
            label=f"{search.run}: probe fails ({search.binding or 'no objective'} binds)",
        )
    for mark in (m for m in search.marks if m.answer):
        axes.scatter(
            [mark.interactivity],
            [mark.throughput],
            s=260,
            marker="*",
            color=colour,
            edgecolors="black",
            zorder=5,
            label=f"{search.run}: find-max answer {mark.load:g}",
        )
