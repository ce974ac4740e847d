"""The worker pool at work: one point on N worker processes, every record back in the parent.

Per point the parent asks every worker holding some of the point's slots (run/shares.py)
to build its share and warm up, reads the server's counters, and tells all of them to
start at one perf_counter_ns instant (one CLOCK_MONOTONIC on a machine). Every record
comes back the moment it ends and goes where a single process's would: the point's list,
the JSONL file, the progress line and the live metrics. Percentiles are computed over all
raw records, never averaged from per-worker summaries.

Ctrl-C (or SIGTERM, or the sidecar's DELETE) stops every worker, whose in-flight
requests end as `cancelled` records; the point is written `complete: false`. A worker
that dies is reported; the others are stopped the same way, the point is written
`complete: false` with the reason, and the run ends (exit 1). So do the run-level stops
the parent sees: every record it receives feeds the server watch (run/server_watch.py),
whose verdict (the server gone) stops the point the same way, and a JSONL line the
parent cannot write (disk full) stops it with `results_write_failed`. The workers do
not hold requests back while the server is only suspected gone (a single process does).
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import time
from collections.abc import Coroutine
from dataclasses import dataclass, field
from time import perf_counter_ns
from typing import Any

import orjson

from loadgen.errors import SetupError
from loadgen.records import RequestRecord
from loadgen.results.files import ResultsWriteError
from loadgen.results.outcome import Stop
from loadgen.run.client_health import ProcessHealth
from loadgen.run.features.taints import Taints
from loadgen.run.lifecycle import PointLife
from loadgen.run.point_records import RunContext
from loadgen.run.session_point import planned_requests
from loadgen.run.shares import Share, requests_in
from loadgen.scale.frames import FrameError, Kind, message, read_frame
from loadgen.workload.session_plan import SessionSource

STOP_TIMEOUT_S = 30.0  # cancelled requests end at once; this bounds a wedged worker
GO_DELAY_NS = 50_000_000  # every worker has read GO well before the common start


@dataclass(slots=True)
class Handle:
    index: int
    process: subprocess.Popen[bytes]
    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    share: Share
    alive: bool = True
    records: int = 0
    chunks: int = 0
    reader_task: asyncio.Task[None] | None = None

    def send(self, kind: Kind, body: dict[str, Any] | None = None) -> None:
        if self.alive and not self.writer.is_closing():
            self.writer.write(message(kind, body))

    async def death(self) -> str:
        """Why this worker is gone (its exit status, once it has one)."""
        with contextlib.suppress(subprocess.TimeoutExpired):
            await asyncio.to_thread(self.process.wait, 5)
        status = self.process.poll()
        how = f"exited with status {status}" if status is not None else "closed its connection"
        return f"worker {self.share.worker}/{self.share.workers} (pid {self.process.pid}) {how}"


class WorkerDied(SetupError):
    """A --workers process exited or failed during the run; str() says which and why."""

    stop_reason = "worker_died"


class Lost(Exception):
    def __init__(self, handle: Handle, reason: str) -> None:
        super().__init__(reason)
        self.handle = handle


@dataclass(slots=True)
class WorkerPool:
    context: RunContext
    share: Share  # this run's shard; workers split it
    handles: list[Handle] = field(default_factory=list)
    # (handle, kind, body); kind None: that worker is gone; handle None: look at write_error
    events: asyncio.Queue[tuple[Handle | None, Kind | None, bytes]] = field(
        default_factory=asyncio.Queue
    )
    current: PointLife | None = None  # the point whose records the workers send now
    write_error: ResultsWriteError | None = None  # a record the parent could not write

    async def sending(
        self, context: RunContext, conc: int, sessions: SessionSource | None
    ) -> WorkerSending:
        """How point `conc` is sent on the workers that hold some of its slots.
        `context`: a --trials trial's (its seed, its files), else the run's. A session
        run's workers each play their lanes."""
        spec, shard_slots = context.spec, self.share.shard_slots(conc)
        active = [h for h in self.handles if h.share.slots(conc)]
        if sessions is not None:
            trees = await asyncio.to_thread(sessions.trees, conc)
            planned, warmup = planned_requests(spec, trees), 0
        else:
            planned = requests_in(spec.load.measured_requests(conc), conc, shard_slots)
            warmup = requests_in(spec.load.warmup_requests(conc), conc, shard_slots)
        return WorkerSending(self, context, conc, active, planned, warmup, len(shard_slots))

    async def _collect(
        self, handles: list[Handle], kind: Kind, *, fail_fast: bool = True
    ) -> dict[int, dict[str, Any]]:
        """Wait until each live worker of `handles` has sent `kind`. A worker that dies
        first raises Lost, or (fail_fast False) is no longer waited for."""
        waiting = {h.index for h in handles if h.alive}
        got: dict[int, dict[str, Any]] = {}
        while waiting:
            if self.write_error is not None and fail_fast:
                raise self.write_error
            handle, got_kind, body = await self.events.get()
            if handle is None:
                continue  # woken to look at write_error
            if got_kind is None or got_kind is Kind.FAILED:
                handle.alive = False
                error = orjson.loads(body).get("error", "?") if body else ""
                reason = (
                    (
                        f"worker {handle.share.worker}/{handle.share.workers} (pid "
                        f"{handle.process.pid}) failed: {error}"
                    )
                    if error
                    else ""
                )
                if fail_fast and handle.index in waiting:
                    raise Lost(handle, reason)
                waiting.discard(handle.index)
            elif got_kind is kind and handle.index in waiting:
                got[handle.index] = orjson.loads(body)
                waiting.discard(handle.index)
        return got

    def _on_frame(self, handle: Handle, kind: Kind, body: bytes) -> None:
        hooks, conc = self.context.hooks, self.current.conc if self.current else 0
        if kind is Kind.RECORD:
            record = RequestRecord.from_dict(orjson.loads(body))
            handle.records += 1
            handle.chunks += len(record.chunk_ns)
            if self.current is not None:
                self._add(record)
        elif kind is Kind.STARTED:
            for _ in range(int(orjson.loads(body)["n"])):
                hooks.request_started(conc)
        elif kind is Kind.LAG:
            for lag_ns in orjson.loads(body)["ns"]:
                hooks.loop_lag(lag_ns / 1e9)
        elif kind is Kind.TAINTED:  # between points: no record of a point to taint
            taints = self.current.find(Taints) if self.current is not None else None
            if taints is not None:
                rows = orjson.loads(body)["tainted"]
                taints.add({(int(r[0]), int(r[1])): str(r[2]) for r in rows})
        else:
            self.events.put_nowait((handle, kind, body))

    def _add(self, record: RequestRecord) -> None:
        assert self.current is not None
        try:
            self.current.records.add(record)
        except ResultsWriteError as exc:  # the sink takes no more lines; the point stops
            self.write_error = self.write_error or exc
            self.events.put_nowait((None, None, b""))

    async def _listen(self, handle: Handle) -> None:
        try:
            while (got := await read_frame(handle.reader)) is not None:
                self._on_frame(handle, *got)
        except FrameError:
            pass
        handle.alive = False
        self.events.put_nowait((handle, None, b""))


class WorkerSending:
    """A point sent by the workers (lifecycle.Sending): each builds its share and warms
    up, then all start at one perf_counter_ns instant (one CLOCK_MONOTONIC on a
    machine). Stopped anywhere (Ctrl-C, the server watch's verdict, a record the parent
    could not write, a worker gone), every live worker is told to stop and what each
    measured is kept."""

    def __init__(
        self,
        pool: WorkerPool,
        context: RunContext,
        conc: int,
        active: list[Handle],
        planned: int,
        warmup: int,
        slots: int,
    ) -> None:
        self.pool = pool
        self.context = context
        self.conc = conc
        self.active = active
        self.planned = planned
        self.warmup_planned = warmup
        self.slots = slots
        self.warmup_failed = 0
        self.cpu_start = 0.0
        self.parent_cpu = 0.0
        self.done: dict[int, dict[str, Any]] = {}

    def early_stop(self) -> Stop | None:
        return None  # a worker never stops its share alone (no saturation stop across them)

    async def warm_up(self) -> None:
        context = self.context
        # a trial's seed, and whether to drop the trial before's connections first
        point = {
            "conc": self.conc,
            "seed": context.spec.seed,
            "trial": context.trial,
            "fresh": context.trial is not None and context.trial > 1,
        }
        for handle in self.active:
            handle.send(Kind.POINT, point)
        warm = await self._stopping(self.pool._collect(self.active, Kind.WARM))
        for body in warm.values():
            self.warmup_failed += int(body["warmup_failed"])

    async def measure(self) -> None:
        self.cpu_start = time.process_time()
        at_ns = perf_counter_ns() + GO_DELAY_NS
        for handle in self.active:
            handle.send(Kind.GO, {"at_ns": at_ns})
        try:
            self.done = await self._stopping(self.pool._collect(self.active, Kind.DONE))
        finally:
            self.parent_cpu = time.process_time() - self.cpu_start

    async def _stopping(
        self, work: Coroutine[Any, Any, dict[int, dict[str, Any]]]
    ) -> dict[int, dict[str, Any]]:
        try:
            return await work
        except Lost as lost:
            reason = str(lost) or await lost.handle.death()
            await self._stop_workers()
            raise WorkerDied(
                f"{reason} during conc {self.conc}; the point is written with "
                f"complete: false and the run stops"
            ) from None
        except BaseException:
            await self._stop_workers()
            raise

    async def _stop_workers(self) -> None:
        """Stop the point on every live worker and wait (a bounded time) for what each
        measured."""
        for handle in self.active:
            handle.send(Kind.STOP)
        pending = [h for h in self.active if h.index not in self.done]
        with contextlib.suppress(TimeoutError):
            self.done.update(
                await asyncio.wait_for(
                    self.pool._collect(pending, Kind.DONE, fail_fast=False), STOP_TIMEOUT_S
                )
            )

    def replay_counts(self) -> dict[str, int]:
        """A session point's replay counts, summed over the workers that reported them
        (max_live_trees too: the sum of each worker's peak, an upper bound)."""
        total: dict[str, int] = {}
        for body in self.done.values():
            for name, value in (body.get("replay") or {}).items():
                total[name] = total.get(name, 0) + int(value)
        return total

    def processes(self) -> list[ProcessHealth]:
        processes = [ProcessHealth("parent", 0, 0, self.parent_cpu, ())]
        for handle in self.active:
            body = self.done.get(handle.index)
            if body is None:  # died, or never answered: what the parent received from it
                processes.append(
                    ProcessHealth(
                        handle.share.label + " (lost)", handle.records, handle.chunks, 0.0, ()
                    )
                )
                continue
            h = body["health"]
            processes.append(
                ProcessHealth(
                    h["label"],
                    h["requests"],
                    h["chunks"],
                    h["cpu_seconds"],
                    tuple(h["lag_ns"]),
                    h.get("event_loop"),
                )
            )
        return processes
