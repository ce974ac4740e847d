"""The sidecar's runs: one sweep at a time, its progress, and its record on disk.

Each run lives in `<data-dir>/runs/<id>/`: `run.json` (state, options, progress, per-point
summaries; replaced atomically on every change of state) and `results/` (the engine's
result files). A restarted sidecar lists the runs it finds there; one that was still
running when the process died is reported as `interrupted`. A record holds the options
with their secrets redacted (config/redact.py): the sweep gets the real ones from the
caller, never from the record.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Literal

import msgspec
import orjson

from loadgen.config.redact import redact_options, redact_text
from loadgen.records import RequestRecord
from loadgen.results.files import write_atomic
from loadgen.results.point import PointResult
from loadgen.results.store import ResultsDir
from loadgen.run.ids import RUN_ID, new_run_id
from loadgen.run.observers import QuietObserver

log = logging.getLogger("loadgen.serve")
RunStateName = Literal["running", "succeeded", "cancelled", "failed", "interrupted"]
# Per-point fields kept in run.json and shown by GET /v1/runs/{id}, in the point file's
# spelling; the full result is in the result files.
SUMMARY_FIELDS = (
    "max_concurrency",
    "num_prompts",
    "completed",
    "failed",
    "duration",
    "request_throughput",
    "output_throughput",
    "total_token_throughput",
    "mean_ttft_ms",
    "median_ttft_ms",
    "p99_ttft_ms",
    "mean_tpot_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "mean_itl_ms",
    "p99_itl_ms",
    "mean_itl_per_token_ms",
    "mean_e2el_ms",
    "p99_e2el_ms",
    "stream_acceptance_length",
    "server_acceptance_length",
    "acceptance_length",
    "acceptance_length_source",
    "error_rate",
)


def point_summary(result: PointResult) -> dict[str, Any]:
    """What run.json and GET /v1/runs/{id} show of each point (the files have the rest)."""
    flat = result.to_json()
    return {name: flat[name] for name in SUMMARY_FIELDS}


@dataclass(slots=True)
class Progress:
    points_total: int = 0
    points_done: int = 0
    current_conc: int | None = None
    point_requests: int = 0
    point_requests_done: int = 0
    requests_done: int = 0
    in_flight: int = 0


@dataclass(slots=True)
class RunRecord:
    """What GET /v1/runs/{id} shows and run.json stores."""

    id: str
    state: RunStateName
    created_unix: float
    options: dict[str, Any]
    progress: Progress = field(default_factory=Progress)
    points: list[dict[str, Any]] = field(default_factory=list)
    finished_unix: float | None = None
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: bytes) -> RunRecord:
        """The record as run.json holds it, decoded against its type
        (msgspec.ValidationError names a field that is missing or of the wrong type)."""
        return msgspec.json.decode(data, type=cls)

    def summary(self) -> dict[str, Any]:
        return {
            "id": self.id,
            "state": self.state,
            "created_unix": self.created_unix,
            "finished_unix": self.finished_unix,
            "points_done": self.progress.points_done,
            "points_total": self.progress.points_total,
        }


class ProgressObserver(QuietObserver):
    """A RunObserver that keeps a RunRecord's progress and point summaries current (loop
    lag and live sessions are on the sidecar's /metrics: MetricsObserver has them)."""

    def __init__(self, record: RunRecord, on_point: Callable[[], None]) -> None:
        self.record = record
        self._on_point = on_point

    def point_started(self, conc: int, num_requests: int) -> None:
        p = self.record.progress
        p.current_conc, p.point_requests, p.point_requests_done = conc, num_requests, 0

    def request_started(self, conc: int) -> None:
        self.record.progress.in_flight += 1

    def request_finished(self, record: RequestRecord) -> None:
        p = self.record.progress
        p.in_flight -= 1
        p.point_requests_done += 1
        p.requests_done += 1

    def point_finished(self, conc: int, result: PointResult) -> None:
        self.record.progress.points_done += 1
        point = {"conc": conc, **point_summary(result)}
        self.record.points.append(point)
        self._on_point()


class RunFailed(Exception):
    """A run's failure already in words (its process reported it, or died): kept as is."""


class Busy(Exception):
    """A run is already active (HTTP 409)."""

    def __init__(self, run_id: str) -> None:
        super().__init__(f"run {run_id} is still running; DELETE it or wait")
        self.run_id = run_id


# (record, results_dir, observer) -> awaitable that runs the sweep
SweepStarter = Callable[[RunRecord, Path, ProgressObserver], Awaitable[None]]


class RunManager:
    """At most one active run; every run's record kept in memory and on disk."""

    def __init__(self, data_dir: Path, clock: Callable[[], float] = time.time) -> None:
        self.data_dir = data_dir
        self.runs_dir = data_dir / "runs"
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self._clock = clock
        self.runs: dict[str, RunRecord] = {}
        self.active: tuple[RunRecord, asyncio.Task[None]] | None = None
        self._cancel_requested: set[str] = set()
        self._load()

    def _load(self) -> None:
        for path in sorted(self.runs_dir.glob("*/run.json")):
            if not RUN_ID.match(path.parent.name):
                continue
            if path.parent.is_symlink() or path.is_symlink():  # never made by loadgen
                log.warning("loadgen serve: %s is reached through a symbolic link; ignored", path)
                continue
            try:
                record = RunRecord.from_json(path.read_bytes())
            except (OSError, msgspec.ValidationError, msgspec.DecodeError) as exc:
                # A damaged file must not keep the service from starting; say which.
                record = RunRecord(
                    id=path.parent.name,
                    state="failed",
                    created_unix=0.0,
                    options={},
                    error=f"unreadable run.json: {exc}",
                )
            options = redact_options(record.options)
            if record.state == "running" or options != record.options:
                if record.state == "running":
                    record.state = "interrupted"
                    record.error = "the sidecar stopped during the run"
                # also rewrites a record kept by a version that stored secrets in clear
                record.options = options
                self.save(record)
            self.runs[record.id] = record

    def run_dir(self, run_id: str) -> Path:
        if not RUN_ID.match(run_id):
            raise KeyError(run_id)
        return self.runs_dir / run_id

    def results_dir(self, run_id: str) -> Path:
        return self.run_dir(run_id) / "results"

    def save(self, record: RunRecord) -> None:
        write_atomic(
            ResultsDir(self.run_dir(record.id)).run_file,
            orjson.dumps(record.to_json(), option=orjson.OPT_INDENT_2),
        )

    def start(self, options: Mapping[str, Any], points: int, sweep: SweepStarter) -> RunRecord:
        """Start `sweep`; the record keeps `options` redacted (the sweep has its own)."""
        if self.active is not None and not self.active[1].done():
            raise Busy(self.active[0].id)
        now = self._clock()
        record = RunRecord(
            id=new_run_id(now), state="running", created_unix=now, options=redact_options(options)
        )
        record.progress.points_total = points
        self.runs[record.id] = record
        self.save(record)
        observer = ProgressObserver(record, lambda: self.save(record))
        task = asyncio.create_task(self._run(record, observer, sweep), name=f"run-{record.id}")
        self.active = (record, task)
        return record

    async def _run(
        self, record: RunRecord, observer: ProgressObserver, sweep: SweepStarter
    ) -> None:
        try:
            await sweep(record, self.results_dir(record.id), observer)
            # The engine may finish a cancelled sweep normally (keeping what it measured).
            record.state = "cancelled" if record.id in self._cancel_requested else "succeeded"
        except asyncio.CancelledError:
            record.state = "cancelled"
            raise
        except RunFailed as exc:
            record.state, record.error = "failed", redact_text(str(exc))
        except Exception as exc:  # a failed sweep is reported, the sidecar keeps serving
            # redacted: a preflight error names the target URL, credentials and all
            record.state, record.error = "failed", redact_text(f"{type(exc).__name__}: {exc}")
        finally:
            record.finished_unix = self._clock()
            record.progress.in_flight = 0
            self.save(record)

    def is_active(self, run_id: str) -> bool:
        return self.is_busy() and self.active is not None and self.active[0].id == run_id

    async def cancel_active(self, timeout_s: float = 5.0) -> None:
        """Cancel the active run and wait (at most timeout_s) until its record is flushed."""
        if self.active is None or self.active[1].done():
            return
        record, task = self.active
        self._cancel_requested.add(record.id)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError, TimeoutError):
            await asyncio.wait_for(asyncio.shield(task), timeout_s)

    @property
    def active_id(self) -> str | None:
        return self.active[0].id if self.active is not None and not self.active[1].done() else None

    def is_busy(self) -> bool:
        return self.active is not None and not self.active[1].done()
