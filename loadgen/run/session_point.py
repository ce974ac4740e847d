"""One concurrency point of a session run: primers, then lanes of session trees.

The same Point (records to JSONL as they end, /metrics scraped around the measured phase,
PointResult written even when interrupted) with the session replay as its warmup and
measured phase, and the session figures (metrics/agentic.py) added to its result.
"""

from __future__ import annotations

import dataclasses

from loadgen.metrics.agentic import (
    latency_stats,
    prefix_cache_rates,
    session_counts,
    ttft_by_context,
)
from loadgen.metrics.schema import PointMetrics, PointResult
from loadgen.records import RequestRecord
from loadgen.run.point import Point, RunContext
from loadgen.run.scheduler import deadline_after
from loadgen.run.sessions import SessionReplay
from loadgen.workload.plan import PointPlan, RequestSpec


class SessionPoint(Point):
    def __init__(self, run: RunContext, conc: int, replay: SessionReplay) -> None:
        super().__init__(run, PointPlan(conc=conc, warmup=(), measured=()))
        self.replay = replay
        self.primers_failed = 0

    @property
    def planned_requests(self) -> int:
        if self.run.spec.duration_s is not None:
            return 0  # open-ended: as many turns as the duration allows
        return sum(tree.request_count() for tree in self.replay.trees)

    async def _warmup(self) -> None:
        await self.replay.warmup(self._send_primer)

    async def _measured_phase(self) -> None:
        deadline = deadline_after(self.run.spec.duration_s, self.run.clock())
        await self.replay.measure(self._send, deadline)

    async def _send_primer(self, request: RequestSpec, scheduled_ns: int) -> RequestRecord:
        record = await self._send_warmup(request, scheduled_ns)
        if record.error is not None:
            self.primers_failed += 1
        return record

    def _result(self, metrics: PointMetrics, complete: bool) -> PointResult:
        result = super()._result(metrics, complete)
        stats = self.replay.stats
        result.update(prefix_cache_rates(self.records, self.before, self.after))  # type: ignore[typeddict-item]
        result.update(latency_stats(self.records))  # type: ignore[typeddict-item]
        result.update(session_counts(self.records))  # type: ignore[typeddict-item]
        result["ttft_by_context"] = ttft_by_context(self.records)
        for field in dataclasses.fields(stats):
            if field.name != "live_trees":
                result[f"replay_{field.name}"] = getattr(stats, field.name)  # type: ignore[literal-required]
        result["replay_primers_failed"] = self.primers_failed
        return result
