"""One concurrency point: warmup, measured requests, records on disk, its PointResult.

Warmup requests open (and keep) the connections and are not recorded. Then the server's
/metrics is scraped, the measured requests run (each record to JSONL the moment it ends),
/metrics is scraped again and the records are summarized. The loop-lag probe and the
process CPU clock cover the measured phase only.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import cast

from loadgen import __version__
from loadgen.client.preflight import ServerInfo
from loadgen.config.spec import RunSpec
from loadgen.metrics.schema import PointMetrics, PointResult
from loadgen.metrics.server import ServerSnapshot
from loadgen.metrics.summary import PointContext, summarize
from loadgen.records import RequestRecord
from loadgen.run.backend import Backend
from loadgen.run.ids import x_request_id
from loadgen.run.loop_health import LoopHealth, LoopLag, no_gc_pauses
from loadgen.run.observers import RunObserver
from loadgen.run.scheduler import (
    Clock,
    Sleep,
    arrival_offsets_ns,
    closed_loop,
    deadline_after,
    open_loop,
)
from loadgen.sinks.files import write_point
from loadgen.sinks.jsonl import JsonlSink
from loadgen.workload.plan import PointPlan, RequestSpec, point_rng

ARRIVALS = 3  # rng stream id for open-loop arrival times


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


@dataclass(frozen=True, slots=True)
class PointOutcome:
    conc: int
    result: PointResult
    complete: bool
    path: Path

    @property
    def error_rate(self) -> float:
        return self.result["error_rate"]


class Point:
    """Runs one plan; `finalize` writes whatever it measured, complete or not."""

    def __init__(self, run: RunContext, plan: PointPlan) -> None:
        self.run = run
        self.plan = plan
        self.records: list[RequestRecord] = []
        path = run.results_dir / f"requests_conc_{plan.conc}.jsonl"
        path.unlink(missing_ok=True)  # a reused --results dir must not mix two runs' records
        self.sink = JsonlSink(path)
        self.before: ServerSnapshot | None = None
        self.after: ServerSnapshot | None = None
        self.started = False
        self.warmup_failed = 0
        self.cpu_start = 0.0
        # CPU of the measured phase only: not the /metrics scrape, GC or summarize after it.
        self.cpu_seconds: float | None = None
        self.loop_lag = LoopLag(on_sample=run.hooks.loop_lag)  # real time, always
        self.health: LoopHealth | None = None

    @property
    def planned_requests(self) -> int:
        return len(self.plan.measured)

    async def run_to_end(self) -> PointOutcome:
        run, conc = self.run, self.plan.conc
        await self._warmup()
        self.before = await run.backend.scrape()
        run.hooks.point_started(conc, self.planned_requests)
        self.started = True
        self.cpu_start = time.process_time()
        self.loop_lag.start()
        with no_gc_pauses():
            try:
                await self._measured_phase()
            finally:  # before the deferred collection, which is not the point's
                self.health = self.loop_lag.stop()
                self.cpu_seconds = time.process_time() - self.cpu_start
        after = await run.backend.scrape()
        return self.finalize(complete=True, after=after)

    async def _warmup(self) -> None:
        await closed_loop(self.plan.warmup, self.plan.conc, self._send_warmup,
                          clock=self.run.clock)

    async def _measured_phase(self) -> None:
        spec, run, measured = self.run.spec, self.run, self.plan.measured
        deadline = deadline_after(spec.duration_s, run.clock())
        if spec.request_rate is None:
            await closed_loop(measured, self.plan.conc, self._send, deadline_ns=deadline,
                              clock=run.clock)
            return
        offsets = arrival_offsets_ns(len(measured), spec.request_rate, spec.burstiness,
                                     point_rng(spec, self.plan.conc, ARRIVALS))
        await open_loop(measured, self.plan.conc, self._send, offsets, deadline_ns=deadline,
                        clock=run.clock, sleep=run.sleep)

    async def _send_warmup(self, request: RequestSpec, scheduled_ns: int) -> RequestRecord:
        record = await self.run.backend.send(
            request, x_request_id=x_request_id(self.run.run_id, self.plan.conc,
                                               request.index, warmup=True),
            conc=self.plan.conc, scheduled_ns=scheduled_ns, on_record=_discard)
        if record.error is not None:  # not a measurement, but a sign worth reporting
            self.warmup_failed += 1
        return record

    async def _send(self, request: RequestSpec, scheduled_ns: int) -> RequestRecord:
        self.run.hooks.request_started(self.plan.conc)
        return await self.run.backend.send(
            request, x_request_id=x_request_id(self.run.run_id, self.plan.conc, request.index),
            conc=self.plan.conc, scheduled_ns=scheduled_ns, on_record=self._on_record)

    def _on_record(self, record: RequestRecord) -> None:
        self.records.append(record)
        self.sink.write(record)
        self.run.hooks.request_finished(record)

    def finalize(self, *, complete: bool, after: ServerSnapshot | None) -> PointOutcome:
        self.sink.close()
        spec = self.run.spec
        ctx = PointContext(conc=self.plan.conc, input_len=spec.isl, output_len=spec.osl,
                           spec_tokens=spec.spec_tokens, slos=spec.slos_ms,
                           percentiles=spec.percentiles, num_gpus=spec.num_gpus)
        self.after = after if complete else None
        metrics = summarize(self.records, ctx, server_before=self.before,
                            server_after=self.after)
        result = self._result(metrics, complete)
        path = write_point(self.run.results_dir, result)
        self.run.hooks.point_finished(self.plan.conc, result)
        return PointOutcome(self.plan.conc, result, complete, path)

    def _result(self, metrics: PointMetrics, complete: bool) -> PointResult:
        """The metrics plus what only the runner knows (client health, identity, settings)."""
        run, spec = self.run, self.run.spec
        cpu = self.cpu_seconds
        if cpu is None:  # stopped before the measured phase ended
            cpu = time.process_time() - self.cpu_start
        health = self.health or self.loop_lag.stop()
        chunks = metrics["total_chunks"]
        # A cast: mypy will not spread into a TypedDict with NotRequired (session) keys.
        return cast(PointResult, {
            **metrics,
            # client health: this process's CPU over the measured phase (a loaded client
            # stamps late); per chunk it is the client's cost of ingesting one event
            "client_cpu_seconds": cpu,
            "client_cpu_per_chunk_us": cpu / chunks * 1e6 if chunks else None,
            "client_loop_lag_p99_ms": health.p99_ms,
            "client_loop_lag_max_ms": health.max_ms,
            "client_loop_lag_samples": health.samples,
            "complete": complete, "target": run.backend.target, "run_id": run.run_id,
            "model_id": run.server.model, "endpoint_type": "openai",
            "endpoint": spec.endpoint, "base_url": run.backend.base_url, "backend": "vllm",
            "input_len": spec.isl, "output_len": spec.osl, "range_ratio": spec.range_ratio,
            "request_rate": spec.request_rate if spec.request_rate is not None else "inf",
            "burstiness": spec.burstiness, "planned_requests": self.planned_requests,
            "warmup_requests": len(self.plan.warmup), "warmup_failed": self.warmup_failed,
            "loadgen_version": __version__,
            "tokenizer_check": run.server.tokenize_check,
        })


def _discard(_record: RequestRecord) -> None:
    """Warmup records are not measurements."""
