"""Requests sent from this process: one point's plan (or this process's share of it),
its warmup and its measured requests, each record handed on the moment it ends.

`Point` is how a point is sent here (lifecycle.Sending); what happens around the sending
(cache resets, counters, telemetry, the file) is the point's life (lifecycle.py). Warmup
requests open (and keep) the connections and are not recorded. The loop-lag probe and
the process CPU clock cover the measured phase only. Every outcome, warmup included,
goes to the server watch (server_watch.py), which holds new requests back while the
server is suspected gone. A worker process (scale/worker_process.py) sends its share
with the same class, its records to the parent.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence

from loadgen.metrics.saturation import SaturationRule
from loadgen.records import RequestRecord
from loadgen.results.outcome import Stop
from loadgen.run.client_health import ProcessHealth, running_loop_name
from loadgen.run.clock import ClockPair, read_pair
from loadgen.run.ids import x_request_id
from loadgen.run.loop_health import LoopLag, no_gc_pauses
from loadgen.run.point_records import RunContext
from loadgen.run.saturation_watch import SaturationWatch
from loadgen.run.scheduler import closed_loop
from loadgen.run.shapes import LoadShape, Phase, arrivals_rng, load_shape
from loadgen.run.stops import SATURATED
from loadgen.workload.plan import PointPlan, RequestSpec


class Point:
    """Sends one plan (or one process's share of it) from this process: warmup, then the
    measured requests. Records go to `on_record`; warmup records to `on_warmup`."""

    def __init__(
        self,
        run: RunContext,
        plan: PointPlan,
        *,
        on_record: Callable[[RequestRecord], None],
        on_warmup: Callable[[RequestRecord], None] | None = None,
        slots: int | None = None,
        label: str = "shard 0/1 worker 0/1",
        stopped: Callable[[], bool] | None = None,
    ) -> None:
        self.run = run
        self.plan = plan
        self.shape: LoadShape = load_shape(run.spec)
        self.slots = plan.conc if slots is None else slots
        self.warmup_planned = len(plan.warmup)
        self.label = label
        self._deliver = on_record
        self._stopped = stopped  # the point measured enough: send no more (PointRecords)
        self._warmup_to = on_warmup
        self.sent_requests = self.sent_chunks = 0
        self.warmup_failed = 0
        self.clock = ClockPair(0, 0, 0)
        self.cpu_start = 0.0
        # CPU of the measured phase only: not the /metrics scrape, GC or summarize after it.
        self.cpu_seconds: float | None = None
        self.loop_lag = LoopLag(on_sample=run.hooks.loop_lag)  # real time, always
        self.saturation: SaturationWatch | None = None  # open loop, unless switched off

    @property
    def planned(self) -> int:
        return len(self.plan.measured)

    def early_stop(self) -> Stop | None:
        verdict = self.saturation.verdict if self.saturation is not None else None
        # measured to the stop, kept, never published as complete
        return Stop(SATURATED, verdict.detail) if verdict is not None else None

    def processes(self) -> list[ProcessHealth]:
        return [self.health()]

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

    async def _measured_phase(self) -> None:
        run, conc = self.run, self.plan.conc
        phase = Phase(
            conc=conc,
            requests=self.plan.measured,
            planned=run.spec.load.measured_requests(conc),
            slots=self.slots,
            send=self._send_unless_stopped,
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
        if self._warmup_to is not None:
            self._warmup_to(record)
        return record

    async def _send_unless_stopped(
        self, request: RequestSpec, scheduled_ns: int
    ) -> RequestRecord | None:
        if self._stopped is not None and self._stopped():
            return None  # not sent: the slot moves past it without a request
        return await self._send(request, scheduled_ns)

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
