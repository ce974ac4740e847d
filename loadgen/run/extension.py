"""What a per-point feature is: an `Extension` of the one point lifecycle (lifecycle.py).

A point's life is a fixed sequence (lifecycle.py draws it); a feature such as the prefix
cache reset, the profiler window or the GPU telemetry hooks into it here and adds its
part of the point's result. Every hook is optional (the base class does nothing), so a
feature states only the moments it cares about. Hooks run in the order the extensions
were built (features/__init__.py), and the ones after the measured phase in the reverse
order: the last feature opened is the first one closed, as with nested `with` blocks.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadgen.client.server_metrics import Scrape
from loadgen.metrics.server import ServerSnapshot
from loadgen.metrics.server_series import ScrapeText
from loadgen.records import RequestRecord
from loadgen.results.point import PointResult
from loadgen.results.store import ResultsDir
from loadgen.run.assemble import PointParts
from loadgen.run.point_records import PointRecords


@dataclass(frozen=True, slots=True)
class Measured:
    """What a point measured, as its extensions see it when its result is made."""

    records: Sequence[RequestRecord]
    # the server's /metrics around the measured phase (`after` None: stopped before it)
    before: Scrape
    after: Scrape | None
    complete: bool

    @property
    def server_before(self) -> ServerSnapshot | None:
        return self.before.total

    @property
    def server_after(self) -> ServerSnapshot | None:
        return self.after.total if self.after is not None else None


class Extension:
    """A per-point feature. Subclasses override the hooks they need."""

    async def before_warmup(self) -> None:
        """Before the first warmup request."""

    async def after_warmup(self) -> None:
        """The warmup is over; the measured phase has not started."""

    async def before_measure(self) -> None:
        """Just before the server's counters are read for the measured phase."""

    def measure_started(self) -> None:
        """The counters were read: the measured phase starts now."""

    def measuring(self, records: PointRecords) -> None:
        """Right after measure_started: the point's records as they arrive, which a
        feature may read off the per-chunk path (a timer of its own) and stop the sending
        with (`records.stop_sending`)."""

    async def after_measure(self, records: Sequence[RequestRecord]) -> None:
        """The measured phase ended (its requests all ended), before the counters are read
        again. Not called when the point was stopped."""

    async def close(self) -> None:
        """Always, once before_measure began: the point ended, was stopped or failed."""

    def cancel(self) -> None:
        """The point is being written: nothing of this feature outlives it (a stopped
        point never reached `after_measure`); what it gathered so far is kept."""

    def settle_records(self, records: list[RequestRecord]) -> bool:
        """Change the records before they are summarized (in place); True when any
        changed, so their file is written again."""
        return False

    def parts(self, parts: PointParts, measured: Measured) -> PointParts:
        """This feature's part of the point's result."""
        return parts

    def write_files(self, store: ResultsDir, result: PointResult, measured: Measured) -> None:
        """Files of its own beside the point's (may raise ResultsWriteError)."""

    def scrapes(self) -> Sequence[ScrapeText]:
        """The /metrics scrapes it kept during the measured phase (--aiperf-artifacts)."""
        return ()


def each(extensions: Sequence[Extension], *, closing: bool = False) -> Sequence[Extension]:
    """The order hooks run in: as built, or reversed for the hooks that close."""
    return tuple(reversed(extensions)) if closing else extensions
