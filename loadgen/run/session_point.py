"""One concurrency point of a session run: primers, then lanes of session trees.

The same Point and PointRecords (records to JSONL as they end, /metrics scraped and gauges
watched around the measured phase, PointResult written even when interrupted) with the
session replay as its warmup and measured phase, and the session figures
(metrics/agentic.py) added to its result. One process only: RunSpec refuses --workers and
--shard for session runs.
"""

from __future__ import annotations

import asyncio
import dataclasses
import zlib
from collections.abc import Sequence
from typing import Any

import msgspec
from tokenizers import Tokenizer

from loadgen.metrics.agentic import (
    latency_stats,
    prefix_cache_rates,
    session_counts,
    ttft_by_context,
)
from loadgen.metrics.server import ServerSnapshot
from loadgen.metrics.session_rollup import session_rollups
from loadgen.records import RequestRecord
from loadgen.results.point import SessionMetrics
from loadgen.run.point import Point, RunContext
from loadgen.run.scheduler import deadline_after
from loadgen.run.sessions import ReplayOptions, SessionReplay
from loadgen.workload.plan import PointPlan, RequestSpec
from loadgen.workload.session_plan import SessionSource
from loadgen.workload.session_render import SessionRenderer


class SessionPoint(Point):
    def __init__(self, run: RunContext, conc: int, replay: SessionReplay) -> None:
        super().__init__(run, PointPlan(conc=conc, warmup=(), measured=()))
        self.replay = replay
        self.primers_failed = 0
        assert self.recorded is not None  # Point keeps its own records here
        self.recorded.planned = self.planned_requests
        self.recorded.extra = self._session_fields

    @property
    def planned_requests(self) -> int:
        if self.run.spec.duration_s is not None:
            return 0  # open-ended: as many turns as the duration allows
        return sum(tree.request_count() for tree in self.replay.trees)

    async def warm_up(self) -> None:
        await self.replay.warmup(self._send_primer)

    async def _measured_phase(self) -> None:
        deadline = deadline_after(self.run.spec.duration_s, self.run.clock())
        await self.replay.measure(self._send, deadline)

    async def _send_primer(self, request: RequestSpec, scheduled_ns: int) -> RequestRecord:
        record = await self._send_warmup(request, scheduled_ns)
        if record.error is not None:
            self.primers_failed += 1
        return record

    def _session_fields(self, records: Sequence[RequestRecord], before: ServerSnapshot | None,
                        after: ServerSnapshot | None) -> SessionMetrics:
        rates = prefix_cache_rates(records, before, after)
        fields: dict[str, Any] = {
            "session_history": "live" if self.run.spec.live_history else "recorded",
            **rates,
            **session_rollups(records, self.run.spec.slos_ms,
                              rates["theoretical_prefix_hit_rate"],
                              rates["server_prefix_hit_rate"]),
            **latency_stats(records),
            **session_counts(records),
            "ttft_by_context": ttft_by_context(records),
        }
        stats = self.replay.stats
        for field in dataclasses.fields(stats):
            if field.name != "live_trees":
                fields[f"replay_{field.name}"] = getattr(stats, field.name)
        fields["replay_primers_failed"] = self.primers_failed
        return msgspec.convert(fields, SessionMetrics)


async def build_session_point(context: RunContext, conc: int, source: SessionSource,
                              tokenizer: Tokenizer) -> SessionPoint:
    """The point's trees (drawn or loaded off the loop), their renderer and replay."""
    spec = context.spec
    trees = await asyncio.to_thread(source.trees, conc)
    renderer = SessionRenderer(source.settings(), tokenizer, context.server.options,
                               source.block_size, spec.seed + conc)
    options = ReplayOptions(
        conc=conc, duration_s=spec.duration_s, start_ratio=source.start_ratio,
        idle_cap_system_s=spec.idle_cap_system_s, idle_cap_tree_s=spec.idle_cap_tree_s,
        seed=spec.seed, run_key=zlib.crc32(context.run_id.encode()))
    replay = SessionReplay(trees, renderer, options, clock=context.clock, sleep=context.sleep,
                           hooks=context.hooks)
    return SessionPoint(context, conc, replay)
