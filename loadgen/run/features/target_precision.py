"""--target-precision METRIC:PCTL:FRACTION: a closed-loop point stops sending once that
percentile's order-statistic interval (metrics/precision.py) has a half-width below
FRACTION of its value; the requests in flight end as usual and are part of the point.

Judged on a timer of its own (every TICK_S), never per chunk: each tick takes the
records that ended since the last one (their samples computed as the point's summary
computes them, metrics/summary.latency_samples) and works the interval out in a thread,
so the event loop that stamps the chunks does not sort. The point's own limits (its
request count, --duration) still end it if the interval never gets there. While it runs,
a line every SAY_EVERY_S gives the interval so far and an estimate of the time left (the
half-width shrinks as 1/sqrt(n): n (relative / fraction)^2 samples needed, at the rate
seen so far). The result's `target_precision` says whether it stopped the point, the
interval it stopped on (and on how many records, in completion order) and the interval
over all the point's records.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import sys
import time
from collections.abc import Sequence

import numpy as np

from loadgen.config.load import TargetPrecision
from loadgen.metrics.arrays import FloatArray, PointArrays, is_completed
from loadgen.metrics.precision import (
    CONFIDENCE,
    PercentileInterval,
    percentile_interval,
    worst_relative,
)
from loadgen.metrics.summary import latency_samples
from loadgen.records import RequestRecord
from loadgen.results.point import TargetPrecisionOutcome
from loadgen.run.assemble import PointParts
from loadgen.run.extension import Extension, Measured
from loadgen.run.point_records import PointRecords

TICK_S = 0.5
SAY_EVERY_S = 5.0


def metric_samples(records: Sequence[RequestRecord], metric: str) -> FloatArray:
    """The metric's samples (ms) of these records' completed requests, as summarize has them."""
    completed = [r for r in records if is_completed(r)]
    if not completed:
        return np.empty(0)
    return latency_samples(PointArrays.build(completed))[metric]


@dataclasses.dataclass(frozen=True, slots=True)
class Stopped:
    requests: int
    interval: PercentileInterval
    worst: float  # the relative half-width the point's records can reach at worst


class TargetPrecisionStop(Extension):
    def __init__(self, target: TargetPrecision, conc: int, planned: int) -> None:
        self.target = target
        self.conc = conc
        self.planned = planned
        self.records: PointRecords | None = None
        self.task: asyncio.Task[None] | None = None
        self.stopped: Stopped | None = None
        self.checks = 0

    def measuring(self, records: PointRecords) -> None:
        self.records = records
        self.task = asyncio.get_running_loop().create_task(self._judge(records))

    async def _judge(self, records: PointRecords) -> None:
        target, seen = self.target, 0
        chunks: list[FloatArray] = []
        start = said = time.perf_counter()
        while True:
            await asyncio.sleep(TICK_S)
            upto = len(records.records)
            chunks.append(metric_samples(records.records[seen:upto], target.metric))
            seen = upto
            values = np.concatenate(chunks)
            chunks = [values]
            # up to `room` more records may still end after a stop decided now: the ones
            # in flight (at most conc) and those that end while this is worked out
            room = self.conc + max(4, self.conc // 4)
            interval, worst = await asyncio.to_thread(self._judged, values, room)
            self.checks += 1
            late = len(records.records) - upto  # ended while it was worked out
            if worst < target.fraction and late + self.conc <= room and interval is not None:
                self.stopped = Stopped(upto, interval, worst)
                records.stop_sending(f"{self._name()} known to ±{worst:.1%}")
                self._say(f"{self._said(interval)} after {upto:,} requests: no more are sent")
                return
            now = time.perf_counter()
            if now - said >= SAY_EVERY_S:
                said = now
                self._say(self._progress(interval, values.size, upto, now - start))

    def _judged(self, values: FloatArray, room: int) -> tuple[PercentileInterval | None, float]:
        """The interval now, and its worst relative half-width once `room` more samples
        join (worked out only when the interval now is narrow enough)."""
        interval = percentile_interval(values, self.target.percentile)
        if interval is None or interval.relative >= self.target.fraction:
            return interval, math.inf
        return interval, worst_relative(values, self.target.percentile, room)

    def _name(self) -> str:
        return f"{self.target.metric} p{self.target.percentile:g}"

    def _said(self, interval: PercentileInterval) -> str:
        return (
            f"{self._name()} {interval.value:,.1f} ms ±{interval.relative:.1%} "
            f"(target {self.target.fraction:.1%})"
        )

    def _progress(
        self, interval: PercentileInterval | None, samples: int, requests: int, elapsed: float
    ) -> str:
        if interval is None:
            return f"{self._name()}: {samples:,} samples, too few for an interval yet"
        if interval.relative < self.target.fraction:
            return (
                f"{self._said(interval)} over {samples:,} samples: narrow enough, but the "
                "requests in flight could still widen it; waiting"
            )
        needed = samples * (interval.relative / self.target.fraction) ** 2
        rate = samples / elapsed if elapsed > 0 else 0.0
        left = (needed - samples) / rate if rate > 0 else math.inf
        cap = (
            f"; the point's {self.planned:,} requests may end first"
            if needed > self.planned
            else ""
        )
        return (
            f"{self._said(interval)} over {samples:,} samples of {requests:,} requests; "
            f"about {left:,.0f} s left at this rate{cap}"
        )

    def _say(self, text: str) -> None:
        print(f"loadgen: conc {self.conc}: {text}", file=sys.stderr)

    async def close(self) -> None:
        self.cancel()
        if self.task is not None:
            with contextlib.suppress(asyncio.CancelledError):
                await self.task

    def cancel(self) -> None:
        if self.task is not None and not self.task.done():
            self.task.cancel()

    def parts(self, parts: PointParts, measured: Measured) -> PointParts:
        target, stopped = self.target, self.stopped
        values = metric_samples(measured.records, target.metric)
        final = percentile_interval(values, target.percentile)
        at_stop = stopped.interval if stopped is not None else None
        outcome = TargetPrecisionOutcome(
            metric=target.metric,
            percentile=target.percentile,
            fraction=target.fraction,
            confidence=CONFIDENCE,
            reached=stopped is not None,
            requests_at_stop=stopped.requests if stopped is not None else None,
            samples_at_stop=at_stop.samples if at_stop is not None else None,
            value_at_stop_ms=at_stop.value if at_stop is not None else None,
            low_at_stop_ms=at_stop.low if at_stop is not None else None,
            high_at_stop_ms=at_stop.high if at_stop is not None else None,
            relative_at_stop=at_stop.relative if at_stop is not None else None,
            worst_relative_at_stop=stopped.worst if stopped is not None else None,
            samples=int(values.size),
            value_ms=final.value if final is not None else None,
            low_ms=final.low if final is not None else None,
            high_ms=final.high if final is not None else None,
            relative=final.relative if final is not None else None,
            checks=self.checks,
        )
        return dataclasses.replace(parts, target_precision=outcome)
