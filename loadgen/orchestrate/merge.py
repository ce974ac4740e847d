"""`loadgen merge` with its standard outputs: the shards merged (scale/merge.py), then
the sweep's files (a sink's), as measure.py plugs them into a run."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

from loadgen.results.store import ResultsDir
from loadgen.scale.merge import MergeOutcome, merge_results
from loadgen.sinks.sweep_files import write_sweep_files


def merge_shards(dirs: Sequence[Path], out: Path) -> MergeOutcome:
    """The merged result set in `out`, its sweep files beside it; a sweep file that could
    not be written is a warning (the points' files are what the merge owes)."""
    outcome = merge_results(dirs, out)
    unwritten = write_sweep_files(ResultsDir(outcome.results_dir), outcome.points)
    return replace(
        outcome,
        warnings=(
            *outcome.warnings,
            *(f"{name} could not be written (the points' files are)" for name in unwritten),
        ),
    )
