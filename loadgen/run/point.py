"""One concurrency point: warmup, measured requests, records on disk, its PointResult.

Warmup requests open (and keep) the connections and are not recorded. Then the server's
/metrics is scraped, the measured requests run (each record to JSONL the moment it ends),
/metrics is scraped again and the records are summarized. The loop-lag probe and the
process CPU clock cover the measured phase only. Every outcome, warmup included, goes to
the server watch (server_watch.py), which holds new requests back while the server is
suspected gone; a point is never written complete while that question is open.
"""

from __future__ import annotations

import contextlib
import dataclasses
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from loadgen import __version__
from loadgen.client.preflight import ServerInfo
from loadgen.client.server_metrics import GaugeWatch, Scrape
from loadgen.config.redact import redact_url
from loadgen.config.spec import RunSpec
from loadgen.metrics.server import ServerSnapshot
from loadgen.metrics.server_urls import per_url_fields
from loadgen.metrics.summary import PointContext
from loadgen.records import RequestRecord
from loadgen.results.files import ResultsWriteError
from loadgen.results.jsonl import JsonlSink
from loadgen.results.point import (
    PointIdentity,
    PointResult,
    PointStatus,
    SessionMetrics,
    SimulatorHealth,
)
from loadgen.results.store import ResultsDir
from loadgen.run.assemble import PointCounts, PointParts, assemble_point
from loadgen.run.backend import Backend
from loadgen.run.client_health import ProcessHealth, running_loop_name
from loadgen.run.clock import ClockPair, clock_facts, read_pair
from loadgen.run.embedded_sim import SimulatorLog, sim_stream_interval
from loadgen.run.ids import x_request_id
from loadgen.run.loop_health import LoopLag, no_gc_pauses
from loadgen.run.observers import NoOutputs, RunObserver, RunOutputs
from loadgen.run.scheduler import (
    Clock,
    Sleep,
    arrival_offsets_ns,
    closed_loop,
    deadline_after,
    open_loop,
)
from loadgen.run.server_watch import ServerWatch
from loadgen.run.stops import Stop
from loadgen.workload.plan import PointPlan, RequestSpec, point_rng

ARRIVALS = 3  # rng stream id for open-loop arrival times
# (records, server counters before, after the measured phase: None when not both read)
SessionFields = Callable[[Sequence[RequestRecord], ServerSnapshot | None,
                          ServerSnapshot | None], SessionMetrics]


@dataclass(frozen=True, slots=True)
class RunContext:
    """What every point of a sweep shares."""

    spec: RunSpec
    backend: Backend
    server: ServerInfo
    run_id: str
    results_dir: Path
    hooks: RunObserver
    clock: Clock
    sleep: Sleep
    # before each measured phase, once warmed up: wait for the other shards (--shard-sync)
    barrier: Callable[[int], Awaitable[None]] | None = None
    # fed every request outcome; holds new requests back while the server is suspected
    # gone (None in a worker process: its parent watches the records it gets)
    watch: ServerWatch | None = None
    # how prompts are built (workload.plan.synthesis_of): words, fitted (and why), dataset
    synthesis: tuple[str, str | None] = ("words", None)
    # the vLLM-format result and the like (a worker process writes none)
    outputs: RunOutputs = field(default_factory=NoOutputs)
    # the log of the simulator loadgen started (--sim): its lateness goes into each point
    simulator_log: SimulatorLog | None = None


@dataclass(frozen=True, slots=True)
class PointOutcome:
    conc: int
    result: PointResult
    complete: bool
    path: Path
    # run.json's extra facts about the point, for `loadgen merge`: clock readings and the
    # server's raw counters before and after
    facts: dict[str, Any] = field(default_factory=dict)
    write_error: ResultsWriteError | None = None  # conc_<N>.json or the JSONL not written

    @property
    def error_rate(self) -> float:
        # None without requests (a shard holding none of a small point's slots)
        return self.result.metrics.error_rate or 0.0


class PointRecords:
    """A point's records as they finish (kept, appended to requests_conc_<N>.jsonl, shown
    live) and, at the end, its PointResult written as conc_<N>.json. The records may come
    from this process (`Point`) or from worker processes (run/workers.py)."""

    def __init__(self, run: RunContext, conc: int, *, planned: int, warmup: int,
                 slots: int) -> None:
        self.run = run
        self.conc = conc
        self.planned = planned
        self.warmup = warmup
        self.slots = slots  # this run's slots of the point: conc, or its shard's share
        self.records: list[RequestRecord] = []
        path = ResultsDir(run.results_dir).requests_file(conc)
        self.sink = JsonlSink(path)  # a fresh file: results_dir.prepare() cleared the way
        self.before = Scrape()
        self.gauge_watch: GaugeWatch | None = None
        self.gauges: dict[str, dict[str, list[float]]] = {}
        self.started = False
        self.clock: ClockPair | None = None
        # More fields a point kind adds from its records and the server's counters around
        # the measured phase (session runs: run/session_point.py); written with the rest.
        self.extra: SessionFields | None = None
        self.simulator_mark: int | None = None  # the simulator log's end at begin()

    def begin(self, before: Scrape) -> None:
        """The measured phase starts now (the server's counters were just read)."""
        self.before, self.started, self.clock = before, True, read_pair()
        log = self.run.simulator_log
        self.simulator_mark = log.mark() if log is not None else None
        self.gauge_watch = self.run.backend.gauge_watch()
        if self.gauge_watch is not None:
            self.gauge_watch.start()
        self.run.hooks.point_started(self.conc, self.planned)

    async def scrape_after(self) -> Scrape:
        """The measured phase is over: the gauges watched during it, then the counters."""
        if self.gauge_watch is not None:
            self.gauges, self.gauge_watch = await self.gauge_watch.stop(), None
        return await self.run.backend.scrape()

    def add(self, record: RequestRecord) -> None:
        self.records.append(record)
        if self.run.watch is not None:
            self.run.watch.observe(record)
        self.sink.write(record)  # ResultsWriteError stops the run (records so far intact)
        self.run.hooks.request_finished(record)

    def close(self) -> None:
        """Stopped during warmup: nothing was measured."""
        with contextlib.suppress(ResultsWriteError):  # the run is stopping already
            self.sink.close()

    def finalize(self, *, complete: bool, after: Scrape | None,
                 processes: Sequence[ProcessHealth], warmup_failed: int,
                 stop: Stop | None = None) -> PointOutcome:
        """Summarize and write conc_<N>.json. A write that fails is on the outcome
        (`write_error`), not raised: a stopped point is finalized on the way out of a run
        that is already stopping, and the caller decides."""
        write_error: ResultsWriteError | None = None
        try:
            self.sink.close()
        except ResultsWriteError as exc:
            write_error = exc
        if self.gauge_watch is not None:
            self.gauge_watch.cancel()  # interrupted: the gauge watch must not outlive the point
        result = self._result(complete, after, processes, warmup_failed, stop)
        _warn_inexact(result)
        store = ResultsDir(self.run.results_dir)
        path = store.point_file(self.conc)
        try:
            store.write_point(result)
            self.run.outputs.point_written(store, result, self.records, complete)
        except ResultsWriteError as exc:
            write_error = write_error or exc
        self.run.hooks.point_finished(self.conc, result)
        return PointOutcome(self.conc, result, complete, path,
                            self._facts(after if complete else None), write_error)

    def _facts(self, after: Scrape | None) -> dict[str, Any]:
        """run.json's facts for `loadgen merge`: the clock pairing and the raw counters
        before and after, summed and (--server-metrics) per URL."""
        facts = {"clock": clock_facts(self.clock, read_pair()) if self.clock else None,
                 "server_before": snapshot_json(self.before.total),
                 "server_after": snapshot_json(after.total if after else None)}
        if self.run.spec.server_metrics:
            facts["server_before_by_url"] = {u: snapshot_json(s)
                                             for u, s in self.before.each.items()}
            facts["server_after_by_url"] = ({u: snapshot_json(s) for u, s in after.each.items()}
                                            if after else None)
        return facts

    def _result(self, complete: bool, after: Scrape | None,
                processes: Sequence[ProcessHealth], warmup_failed: int,
                stop: Stop | None) -> PointResult:
        spec = self.run.spec
        server_after = after.total if complete and after is not None else None
        by_url = per_url_fields(list(self.before.each), self.before.each, after.each,
                                self.gauges) if spec.server_metrics and after else None
        # A shard's own result: the steady window is that of its own slots.
        ctx = PointContext(conc=self.slots, input_len=spec.isl, output_len=spec.osl,
                           spec_tokens=spec.spec_tokens, slos=spec.slos_ms,
                           percentiles=spec.percentiles, num_gpus=spec.num_gpus,
                           stream_interval=sim_stream_interval(spec.sim_args)
                           if spec.sim else None, golden=spec.golden_al)
        sessions = (self.extra(self.records, self.before.total, server_after)
                    if self.extra is not None else None)
        parts = PointParts(
            identity=self._identity(), status=point_status(complete, stop),
            counts=PointCounts(self.planned, self.warmup, warmup_failed),
            processes=[p.to_json() for p in processes],
            clock_uncertainty_ms=0.0,  # one machine: every process read one CLOCK_MONOTONIC
            synthesis=self.run.synthesis, server_metrics_by_url=by_url,
            simulator=self._simulator(), sessions=sessions)
        return assemble_point(self.records, ctx, self.conc, parts,
                              server_before=self.before.total, server_after=server_after)

    def _simulator(self) -> SimulatorHealth:
        """How late the simulator loadgen started ran over the measured phase."""
        log = self.run.simulator_log
        if log is None or self.simulator_mark is None:
            return SimulatorHealth()
        return log.lateness_since(self.simulator_mark)

    def _identity(self) -> PointIdentity:
        run, spec = self.run, self.run.spec
        return PointIdentity(
            # a shard's own file holds its share only; `loadgen merge` writes the whole point
            shard=f"{spec.shard_index}/{spec.shard_count}" if spec.shard_count > 1 else None,
            shards_merged=1,
            target=run.backend.target, run_id=run.run_id,
            model_id=run.server.model, endpoint_type="openai",
            endpoint=spec.endpoint, base_url=redact_url(run.backend.base_url),
            backend="vllm",
            # the client that timed the streams: its per-chunk cost is in client_*
            http_client=spec.http_client,
            input_len=spec.isl, output_len=spec.osl, range_ratio=spec.range_ratio,
            request_rate=spec.request_rate if spec.request_rate is not None else "inf",
            burstiness=spec.burstiness, loadgen_version=__version__,
            tokenizer_check=run.server.tokenize_check)


def point_status(complete: bool, stop: Stop | None) -> PointStatus:
    """Why a point stopped early: a code, and the line loadgen printed about it
    (`incomplete_reason` is that same line, the name `loadgen merge` reads)."""
    if complete or stop is None:
        return PointStatus(complete=complete, stop_reason=None, stop_detail=None,
                           incomplete_reason=None)
    return PointStatus(complete=False, stop_reason=stop.reason, stop_detail=stop.detail,
                       incomplete_reason=stop.detail)


def _warn_inexact(result: PointResult) -> None:
    prompts = result.prompts
    if prompts.input_len_approximate:
        print(f"loadgen: WARNING: conc {result.conc}: "
              f"{prompts.input_len_mismatches} prompts are not of the requested length (up "
              f"to {prompts.input_len_max_abs_diff} tokens off): this tokenizer cannot give "
              f"them exactly ({prompts.prompt_synthesis_note}); input_lens hold their true "
              "lengths", file=sys.stderr)


class Point:
    """Runs one plan (or one process's share of it) in this process: warmup, then the
    measured requests. Records go to `on_record`, by default this point's own
    PointRecords; `finalize` writes whatever was measured, complete or not."""

    def __init__(self, run: RunContext, plan: PointPlan, *, slots: int | None = None,
                 on_record: Callable[[RequestRecord], None] | None = None,
                 label: str = "shard 0/1 worker 0/1") -> None:
        self.run = run
        self.plan = plan
        self.slots = plan.conc if slots is None else slots
        self.label = label
        self.recorded: PointRecords | None = None
        if on_record is None:
            self.recorded = PointRecords(run, plan.conc, planned=len(plan.measured),
                                         warmup=len(plan.warmup), slots=self.slots)
            on_record = self.recorded.add
        self._deliver = on_record
        self.sent_requests = self.sent_chunks = 0
        self.warmup_failed = 0
        self.clock = ClockPair(0, 0, 0)
        self.cpu_start = 0.0
        # CPU of the measured phase only: not the /metrics scrape, GC or summarize after it.
        self.cpu_seconds: float | None = None
        self.loop_lag = LoopLag(on_sample=run.hooks.loop_lag)  # real time, always

    @property
    def started(self) -> bool:
        return self.recorded is not None and self.recorded.started

    async def run_to_end(self) -> PointOutcome:
        assert self.recorded is not None
        await self.warm_up()
        if self.run.barrier is not None:
            await self.run.barrier(self.plan.conc)
        self.recorded.begin(await self.run.backend.scrape())
        await self.measure()
        if self.run.watch is not None:  # never complete while the server may be gone
            await self.run.watch.settled()
        return self.finalize(complete=True, after=await self.recorded.scrape_after())

    async def warm_up(self) -> None:
        await closed_loop(self.plan.warmup, self.slots, self._send_warmup, clock=self.run.clock)

    async def measure(self) -> None:
        self.clock = read_pair()
        self.cpu_start = time.process_time()
        self.loop_lag.start()
        with no_gc_pauses():
            try:
                await self._measured_phase()
            finally:  # before the deferred collection, which is not the point's
                self.loop_lag.stop()
                self.cpu_seconds = time.process_time() - self.cpu_start

    def health(self) -> ProcessHealth:
        cpu = self.cpu_seconds
        if cpu is None:  # stopped before the measured phase ended
            self.loop_lag.stop()
            cpu = time.process_time() - self.cpu_start if self.cpu_start else 0.0
        return ProcessHealth(self.label, self.sent_requests, self.sent_chunks, cpu,
                             tuple(self.loop_lag.samples), running_loop_name())

    def finalize(self, *, complete: bool, after: Scrape | None,
                 stop: Stop | None = None) -> PointOutcome:
        assert self.recorded is not None
        return self.recorded.finalize(complete=complete, after=after,
                                      processes=[self.health()],
                                      warmup_failed=self.warmup_failed, stop=stop)

    async def _measured_phase(self) -> None:
        spec, run, measured = self.run.spec, self.run, self.plan.measured
        deadline = deadline_after(spec.duration_s, run.clock())
        if spec.request_rate is None:
            await closed_loop(measured, self.slots, self._send, deadline_ns=deadline,
                              clock=run.clock)
            return
        # The whole point's arrival times (a share keeps its requests' own), so the union
        # of all processes' arrivals is the single-process one.
        offsets = arrival_offsets_ns(spec.measured_requests(self.plan.conc),
                                     spec.request_rate, spec.burstiness,
                                     point_rng(spec, self.plan.conc, ARRIVALS))
        await open_loop(measured, self.slots, self._send, offsets_for(measured, offsets),
                        deadline_ns=deadline, clock=run.clock, sleep=run.sleep)

    async def _send_warmup(self, request: RequestSpec, scheduled_ns: int) -> RequestRecord:
        watch = self.run.watch
        if watch is not None:
            await watch.admit()
        record = await self.run.backend.send(
            request, x_request_id=x_request_id(self.run.run_id, self.plan.conc,
                                               request.index, warmup=True),
            conc=self.plan.conc, scheduled_ns=scheduled_ns, on_record=_discard)
        if watch is not None:
            watch.observe(record)
        if record.error is not None:  # not a measurement, but a sign worth reporting
            self.warmup_failed += 1
        return record

    async def _send(self, request: RequestSpec, scheduled_ns: int) -> RequestRecord:
        if self.run.watch is not None:
            await self.run.watch.admit()
        self.run.hooks.request_started(self.plan.conc)
        return await self.run.backend.send(
            request, x_request_id=x_request_id(self.run.run_id, self.plan.conc, request.index),
            conc=self.plan.conc, scheduled_ns=scheduled_ns, on_record=self._on_record)

    def _on_record(self, record: RequestRecord) -> None:
        record = dataclasses.replace(record, clock_mono_ns=self.clock.mono_ns,
                                     clock_unix_ns=self.clock.unix_ns)
        self.sent_requests += 1
        self.sent_chunks += len(record.chunk_ns)
        self._deliver(record)


def _discard(_record: RequestRecord) -> None:
    """Warmup records are not measurements."""


def offsets_for(requests: Sequence[RequestSpec], offsets: Sequence[int]) -> list[int]:
    """Each request's own arrival offset (requests carry their index in the point)."""
    return [offsets[request.index] for request in requests]


def snapshot_json(snapshot: ServerSnapshot | None) -> dict[str, Any] | None:
    if snapshot is None:
        return None
    return {"samples": dict(snapshot.samples),
            "keyed": {name: dict(values) for name, values in snapshot.keyed.items()}}
