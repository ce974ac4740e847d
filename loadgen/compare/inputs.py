"""Result directories as `compare` and `report` read them.

A RUN argument is a result directory (it holds conc_<N>.json) or a tree written by a
sweep file (its lanes.json lists the lanes in the file's order; a directory of result
directories without one is read in name order), or a `--find-max` directory (its
capacity.json and probes: compare/capacity_inputs.py). Every file is read as its typed
model (PointResult, RunRecord, AccuracyResult): their spellings stay in results/.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.compare.capacity_inputs import (
    CapacityView,
    capacity_points,
    capacity_run_json,
    has_capacity,
    read_capacity,
)
from loadgen.errors import UsageError
from loadgen.metrics.compare import RunInput
from loadgen.results.accuracy import AccuracyResult
from loadgen.results.point import PointResult, ResultFileError
from loadgen.results.run_record import RunRecord
from loadgen.results.store import ResultsDir, read_json


@dataclass(frozen=True, slots=True)
class RunDir:
    name: str
    path: Path
    run: RunRecord | None  # run.json, None when the run never wrote one
    results: Mapping[int, PointResult]  # concurrency -> conc_<N>.json, decoded
    # concurrency -> its accuracy point's score (accuracy_gsm8k/gsm8k_conc_<N>.json)
    accuracy: Mapping[int, AccuracyResult]
    capacity: CapacityView | None = None  # a --find-max directory's search

    def as_input(self) -> RunInput:
        return RunInput(self.name, self.results, self.accuracy)

    def requests_file(self, conc: int, trial: int | None = None) -> Path:
        return ResultsDir(self.path).requests_file(conc, trial)

    def workload(self) -> dict[str, Any]:
        """What shapes the requests, for `compare`'s mismatch warning: the points' own
        lengths and model, and where the prompts came from (run.json's settings; absent
        in a directory without one)."""
        first = self.results[min(self.results)].identity
        shape: dict[str, Any] = {
            "isl": first.input_len,
            "osl": first.output_len,
            "range_ratio": first.range_ratio,
            "model": first.model_id,
            "endpoint": first.endpoint,
        }
        if self.run is not None:  # the settings that change the requests themselves
            workload, session = self.run.settings.workload, self.run.settings.session
            shape |= {
                "dataset": None if workload.dataset is None else str(workload.dataset),
                "dataset_format": workload.dataset_format,
                "turns": session.turns,
                "turn_tokens": session.turn_tokens,
                "multi_turn": session.multi_turn,
            }
        return shape


def _is_run(path: Path) -> bool:
    return bool(ResultsDir(path).point_concs()) or (
        has_capacity(path) and bool(capacity_points(read_capacity(path)))
    )


def _tree_lanes(path: Path) -> list[tuple[str, Path]]:
    index = ResultsDir(path).lanes_file
    if index.is_file():
        lanes = _lanes_of(read_json(index), index)
        found = [
            (str(lane["name"]), path / str(lane.get("dir", lane["name"])))
            for lane in lanes
            if isinstance(lane, dict) and "name" in lane
        ]
        return [(name, lane) for name, lane in found if lane.is_dir() and _is_run(lane)]
    return [
        (child.name, child) for child in sorted(path.iterdir()) if child.is_dir() and _is_run(child)
    ]


def expand(arguments: Sequence[Path]) -> list[tuple[str, Path]]:
    """(name, result directory) for every run the arguments name, in order."""
    runs: list[tuple[str, Path]] = []
    for path in arguments:
        if not path.is_dir():
            raise UsageError(
                f"{path}: no such directory; give result directories "
                "(holding conc_<N>.json) or a sweep file's results tree"
            )
        if _is_run(path):
            runs.append((path.name, path))
            continue
        lanes = _tree_lanes(path)
        if not lanes:
            raise UsageError(
                f"{path}: no results here (no conc_<N>.json, no lane directories holding them)"
            )
        runs += lanes
    return _unique_names(runs)


def _unique_names(runs: list[tuple[str, Path]]) -> list[tuple[str, Path]]:
    """Directory names, or the paths themselves where two runs share a name."""
    names = [name for name, _ in runs]
    return [(name if names.count(name) == 1 else str(path), path) for name, path in runs]


def _lanes_of(index: Any, path: Path) -> list[Any]:
    lanes = index.get("lanes") if isinstance(index, dict) else None
    if not isinstance(lanes, list):
        raise ResultFileError(
            f"{path}: field 'lanes': expected a list; not a lanes.json loadgen wrote"
        )
    return lanes


def load_run(name: str, path: Path) -> RunDir:
    store = ResultsDir(path)
    capacity = read_capacity(path) if has_capacity(path) else None
    results = store.read_points()
    run = store.read_run() if store.run_file.is_file() else None
    if capacity is not None and not results:  # a --find-max directory: its probes' points
        results, run = capacity_points(capacity), capacity_run_json(path, capacity)
    return RunDir(name, path, run, results, _accuracy(path, results), capacity)


def _accuracy(path: Path, results: Mapping[int, PointResult]) -> dict[int, AccuracyResult]:
    """The score of each point's concurrency, where the run has an accuracy point there."""
    scores = ResultsDir(ResultsDir(path).accuracy_dir("gsm8k"))
    return {
        conc: scores.read_accuracy("gsm8k", conc)
        for conc in results
        if scores.accuracy_file("gsm8k", conc).is_file()
    }


def load_runs(arguments: Sequence[Path]) -> list[RunDir]:
    return [load_run(name, path) for name, path in expand(arguments)]
