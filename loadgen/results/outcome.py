"""A point as the sweep keeps it: its result, its file, and why it stopped early."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from loadgen.results.files import ResultsWriteError
from loadgen.results.point import PointResult
from loadgen.results.run_record import PointFacts


@dataclass(frozen=True, slots=True)
class Stop:
    """Why a point ended before its plan did (`stop_reason`/`stop_detail` in its result)."""

    reason: str
    detail: str


@dataclass(frozen=True, slots=True)
class PointOutcome:
    conc: int
    result: PointResult
    complete: bool
    path: Path
    # run.json's extra facts about the point, for `loadgen merge`: clock readings and the
    # server's raw counters before and after
    facts: PointFacts = field(default_factory=PointFacts)
    write_error: ResultsWriteError | None = None  # conc_<N>.json or the JSONL not written

    @property
    def error_rate(self) -> float:
        # None without requests (a shard holding none of a small point's slots)
        return self.result.metrics.error_rate or 0.0
