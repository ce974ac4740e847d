"""The runner's live hooks: what a progress line, an exporter or the sidecar implement."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from loadgen.metrics.server_series import PointCapture
from loadgen.records import RequestRecord
from loadgen.results.point import PointResult
from loadgen.results.store import ResultsDir


class RunOutputs(Protocol):
    """The files a run writes beyond its own (run.json, point and record files): the
    vLLM-format result, the AIPerf artifacts, sweep.csv and its plot
    (sinks/run_files.py). The engine calls
    them and never imports a sink; `loadgen.orchestrate.measure` plugs the standard ones in."""

    def point_written(
        self,
        store: ResultsDir,
        result: PointResult,
        records: Sequence[RequestRecord],
        complete: bool,
        capture: PointCapture | None = None,
    ) -> None:
        """After the point file; may raise ResultsWriteError (the point's write error).
        `capture`: with --aiperf-artifacts, the warmup records and server scrapes."""

    def point_kept(
        self,
        store: ResultsDir,
        result: PointResult,
        records: Sequence[RequestRecord],
        capture: PointCapture,
    ) -> None:
        """--resume: a complete point kept from the attempt resumed; writes those of its
        outputs that are missing (the AIPerf artifacts a failed write left out). May
        raise ResultsWriteError."""

    def sweep_written(self, store: ResultsDir, results: Sequence[PointResult]) -> list[str]:
        """At the end (complete points only); the names of files it could not write."""


class NoOutputs:
    """Only the engine's own files."""

    def point_written(
        self,
        store: ResultsDir,
        result: PointResult,
        records: Sequence[RequestRecord],
        complete: bool,
        capture: PointCapture | None = None,
    ) -> None:
        pass

    def point_kept(
        self,
        store: ResultsDir,
        result: PointResult,
        records: Sequence[RequestRecord],
        capture: PointCapture,
    ) -> None:
        pass

    def sweep_written(self, store: ResultsDir, results: Sequence[PointResult]) -> list[str]:
        return []


class RunObserver(Protocol):
    """Live hooks (progress line, Prometheus exporter, sidecar); all sync and cheap."""

    def point_started(self, conc: int, num_requests: int) -> None: ...
    def request_started(self, conc: int) -> None: ...
    def request_finished(self, record: RequestRecord) -> None: ...
    def point_finished(self, conc: int, result: PointResult) -> None: ...
    def loop_lag(self, seconds: float) -> None: ...
    # Session runs only: a session (root or subagent) of a measured replay began / ended.
    # A root session ends when its whole tree has (it waits for its subagents), so the
    # live roots are the live trees.
    def session_started(self, conc: int, root: bool) -> None: ...
    def session_finished(self, conc: int, root: bool) -> None: ...


class QuietObserver:
    """Every hook a no-op: an observer subclasses it and overrides the hooks it uses."""

    def point_started(self, conc: int, num_requests: int) -> None:
        pass

    def request_started(self, conc: int) -> None:
        pass

    def request_finished(self, record: RequestRecord) -> None:
        pass

    def point_finished(self, conc: int, result: PointResult) -> None:
        pass

    def loop_lag(self, seconds: float) -> None:
        pass

    def session_started(self, conc: int, root: bool) -> None:
        pass

    def session_finished(self, conc: int, root: bool) -> None:
        pass


class FanoutObserver:
    """Forwards every hook call to each of several observers (None entries are skipped)."""

    def __init__(self, *observers: RunObserver | None) -> None:
        self.observers = [o for o in observers if o is not None]

    def point_started(self, conc: int, num_requests: int) -> None:
        for o in self.observers:
            o.point_started(conc, num_requests)

    def request_started(self, conc: int) -> None:
        for o in self.observers:
            o.request_started(conc)

    def request_finished(self, record: RequestRecord) -> None:
        for o in self.observers:
            o.request_finished(record)

    def point_finished(self, conc: int, result: PointResult) -> None:
        for o in self.observers:
            o.point_finished(conc, result)

    def loop_lag(self, seconds: float) -> None:
        for o in self.observers:
            o.loop_lag(seconds)

    def session_started(self, conc: int, root: bool) -> None:
        for o in self.observers:
            o.session_started(conc, root)

    def session_finished(self, conc: int, root: bool) -> None:
        for o in self.observers:
            o.session_finished(conc, root)
