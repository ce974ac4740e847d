"""A `--find-max` results directory as `compare` and `report` read it.

The directory holds capacity.json and one find_max_<kind>_<load>/ directory per probe
(each a one-point run). The report draws every probe on the throughput-interactivity
figure, so each probe's point is read back here. The run's own points (the comparison
tables) are the probes' points by concurrency: every probe of a conc search; for a rate
search (every probe at the same concurrency) the answer's probe, else the first failing.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loadgen.results.capacity import CapacityProbe, CapacityResult
from loadgen.results.point import PointResult
from loadgen.results.run_record import RunRecord
from loadgen.results.store import ResultsDir


@dataclass(frozen=True, slots=True)
class ProbeView:
    probe: CapacityProbe
    result: PointResult | None  # None: the probe's directory holds no point file


@dataclass(frozen=True, slots=True)
class CapacityView:
    result: CapacityResult
    probes: tuple[ProbeView, ...]  # in the order measured

    @property
    def measured(self) -> tuple[ProbeView, ...]:
        return tuple(p for p in self.probes if p.result is not None)


def has_capacity(path: Path) -> bool:
    return ResultsDir(path).capacity_file.is_file()


def read_capacity(path: Path) -> CapacityView:
    capacity = ResultsDir(path).read_capacity()
    return CapacityView(
        capacity, tuple(ProbeView(p, _probe_point(path / p.results)) for p in capacity.probes)
    )


def _probe_point(directory: Path) -> PointResult | None:
    if not directory.is_dir():
        return None
    points = ResultsDir(directory).read_points()
    return points[max(points)] if points else None


def capacity_points(view: CapacityView) -> dict[int, PointResult]:
    """The run's points by concurrency (see the module's docstring)."""
    if view.result.find_max == "conc":
        return {p.result.conc: p.result for p in view.measured if p.result is not None}
    wanted = view.result.last_pass or view.result.first_fail
    chosen = next((p for p in view.measured if wanted and p.probe.load == wanted.load), None)
    chosen = chosen or (view.measured[0] if view.measured else None)
    if chosen is None or chosen.result is None:
        return {}
    return {chosen.result.conc: chosen.result}


def probe_points(view: CapacityView) -> dict[float, PointResult]:
    """Each measured probe's point by its load (the report draws them)."""
    return {p.probe.load: p.result for p in view.measured if p.result is not None}


def capacity_run_json(path: Path, view: CapacityView) -> RunRecord | None:
    """The settings to show: the first probe's run.json (every probe shares them)."""
    for probe in view.measured:
        store = ResultsDir(path / probe.probe.results)
        if store.run_file.is_file():
            return store.read_run()
    return None
