"""One concurrency point: warmup, measured requests, records on disk, its PointResult.

Warmup requests open (and keep) the connections and are not recorded. Then the server's
/metrics is scraped, the measured requests run (each record to JSONL the moment it ends),
/metrics is scraped again and the records are summarized. The loop-lag probe and the
process CPU clock cover the measured phase only. Every outcome, warmup included, goes to
the server watch (server_watch.py), which holds new requests back while the server is
suspected gone; a point is never written complete while that question is open.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from loadgen.client.server_metrics import Scrape
from loadgen.metrics.saturation import SaturationRule
from loadgen.records import RequestRecord
from loadgen.results.outcome import PointOutcome, Stop
from loadgen.run.client_health import ProcessHealth, running_loop_name
from loadgen.run.clock import ClockPair, read_pair
from loadgen.run.ids import x_request_id
from loadgen.run.loop_health import LoopLag, no_gc_pauses
from loadgen.run.point_records import PointRecords, RunContext
from loadgen.run.saturation_watch import SaturationWatch
from loadgen.run.scheduler import closed_loop
from loadgen.run.shapes import LoadShape, Phase, arrivals_rng, load_shape
from loadgen.run.stops import SATURATED
from loadgen.workload.plan import PointPlan, RequestSpec


class Point:
    """Runs one plan (or one process's share of it) in this process: warmup, then the
    measured requests. Records go to `on_record`, by default this point's own
    PointRecords; `finalize` writes whatever was measured, complete or not."""

    def __init__(
        self,
        run: RunContext,
        plan: PointPlan,
        *,
        slots: int | None = None,
        on_record: Callable[[RequestRecord], None] | None = None,
        label: str = "shard 0/1 worker 0/1",
    ) -> None:
        self.run = run
        self.plan = plan
        self.shape: LoadShape = load_shape(run.spec)
        self.slots = plan.conc if slots is None else slots
        self.label = label
        self.recorded: PointRecords | None = None
        if on_record is None:
            self.recorded = PointRecords(
                run,
                plan.conc,
                planned=len(plan.measured),
                warmup=len(plan.warmup),
                slots=self.slots,
            )
            on_record = self.recorded.add
        self._deliver = on_record
        self.sent_requests = self.sent_chunks = 0
        self.warmup_failed = 0
        self.clock = ClockPair(0, 0, 0)
        self.cpu_start = 0.0
        # CPU of the measured phase only: not the /metrics scrape, GC or summarize after it.
        self.cpu_seconds: float | None = None
        self.loop_lag = LoopLag(on_sample=run.hooks.loop_lag)  # real time, always
        self.saturation: SaturationWatch | None = None  # open loop, unless switched off

    @property
    def started(self) -> bool:
        return self.recorded is not None and self.recorded.started

    async def run_to_end(self) -> PointOutcome:
        assert self.recorded is not None
        await self.recorded.reset_cache(warmed=False)
        await self.warm_up()
        await self.recorded.reset_cache(warmed=True)
        if self.run.barrier is not None:
            await self.run.barrier(self.plan.conc)
        await self.recorded.start_power()
        await self.recorded.open_series()
        try:
            await self.recorded.start_profile()
            self.recorded.begin(await self.run.backend.scrape())
            await self.measure()
            if self.run.watch is not None:  # never complete while the server may be gone
                await self.run.watch.settled()
            after = await self.recorded.scrape_after()
        finally:  # after the gauges stopped: the trace export is not the point's
            await self.recorded.stop_profile()
        verdict = self.saturation.verdict if self.saturation is not None else None
        if verdict is not None:  # measured to the stop, kept, never published as complete
            return self.finalize(complete=False, after=after, stop=Stop(SATURATED, verdict.detail))
        return self.finalize(complete=True, after=after)

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
        return ProcessHealth(
            self.label,
            self.sent_requests,
            self.sent_chunks,
            cpu,
            tuple(self.loop_lag.samples),
            running_loop_name(),
        )

    def finalize(
        self, *, complete: bool, after: Scrape | None, stop: Stop | None = None
    ) -> PointOutcome:
        assert self.recorded is not None
        return self.recorded.finalize(
            complete=complete,
            after=after,
            processes=[self.health()],
            warmup_failed=self.warmup_failed,
            stop=stop,
        )

    async def _measured_phase(self) -> None:
        run, conc = self.run, self.plan.conc
        phase = Phase(
            conc=conc,
            requests=self.plan.measured,
            planned=run.spec.load.measured_requests(conc),
            slots=self.slots,
            send=self._send,
            clock=run.clock,
            sleep=run.sleep,
            rng=arrivals_rng(run.spec, conc),
            watch=self._watch_saturation,
        )
        await self.shape.measure(phase)

    def _watch_saturation(self, arrivals: Sequence[int]) -> Callable[[int], bool] | None:
        """An open shape's over-saturation stop over its arrivals, unless switched off."""
        load = self.run.spec.load
        if not load.saturation_stop:
            return None
        self.saturation = SaturationWatch(
            SaturationRule(window_s=load.saturation_window_s), self.run.clock(), arrivals
        )
        return self.saturation.saturated

    async def _send_warmup(self, request: RequestSpec, scheduled_ns: int) -> RequestRecord:
        watch = self.run.watch
        if watch is not None:
            await watch.admit()
        record = await self.run.backend.send(
            request,
            x_request_id=x_request_id(
                self.run.run_id, self.plan.conc, request.index, warmup=True, trial=self.run.trial
            ),
            conc=self.plan.conc,
            scheduled_ns=scheduled_ns,
            on_record=_discard,
        )
        if watch is not None:
            watch.observe(record)
        if record.error is not None:  # not a measurement, but a sign worth reporting
            self.warmup_failed += 1
        if self.run.spec.output.aiperf_artifacts is not None and self.recorded is not None:
            self.recorded.warmup_records.append(record)
        return record

    async def _send(self, request: RequestSpec, scheduled_ns: int) -> RequestRecord:
        if self.run.watch is not None:
            await self.run.watch.admit()
        self.run.hooks.request_started(self.plan.conc)
        return await self.run.backend.send(
            request,
            x_request_id=x_request_id(
                self.run.run_id, self.plan.conc, request.index, trial=self.run.trial
            ),
            conc=self.plan.conc,
            scheduled_ns=scheduled_ns,
            on_record=self._on_record,
        )

    def _on_record(self, record: RequestRecord) -> None:
        record = dataclasses.replace(
            record, clock_mono_ns=self.clock.mono_ns, clock_unix_ns=self.clock.unix_ns
        )
        self.sent_requests += 1
        self.sent_chunks += len(record.chunk_ns)
        if self.saturation is not None:
            self.saturation.observe(record)
        self._deliver(record)


def _discard(_record: RequestRecord) -> None:
    """Warmup records are not measurements."""
