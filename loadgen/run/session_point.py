"""One concurrency point of a session run: primers, then lanes of session trees.

Sent like any point from this process (point.py), with the session replay as its warmup
and measured phase; its life is every point's (lifecycle.py), the session figures
(metrics/agentic.py) added by an extension (features/session_fields.py). With --workers
each worker process plays its lanes (run/sessions.py) and the parent assembles the point
from all records and the summed replay counts (scale/pool.py). Shards (--shard I/N)
each play their lanes the same way, and the merge assembles the session
figures over all shards' records (scale/merge.py).
"""

from __future__ import annotations

import asyncio
import dataclasses
import zlib
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import msgspec
from tokenizers import Tokenizer

from loadgen.config.session import SessionSpec
from loadgen.config.spec import RunSpec
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
from loadgen.run.point import Point
from loadgen.run.point_records import RunContext
from loadgen.run.scheduler import deadline_after
from loadgen.run.sessions import ReplayOptions, ReplayStats, SessionReplay
from loadgen.run.shares import Share
from loadgen.workload.plan import PointPlan
from loadgen.workload.session_plan import SessionSource
from loadgen.workload.session_render import SessionRenderer
from loadgen.workload.sessions import SessionTree


def planned_requests(spec: RunSpec, trees: Sequence[SessionTree]) -> int:
    if spec.load.duration_s is not None:
        return 0  # open-ended: as many turns as the duration allows
    return sum(tree.request_count() for tree in trees)


def session_metrics(
    session: SessionSpec,
    slos_ms: Mapping[str, float],
    records: Sequence[RequestRecord],
    before: ServerSnapshot | None,
    after: ServerSnapshot | None,
    replay: Mapping[str, int],
) -> SessionMetrics:
    """The session fields of a point: from its records, the server's counters around it
    and the replay's counts (ReplayStats and primers_failed; summed over workers, and
    over shards by `loadgen merge`)."""
    rates = prefix_cache_rates(records, before, after)
    fields: dict[str, Any] = {
        "session_history": "live" if session.live_history else "recorded",
        **rates,
        **session_rollups(
            records,
            slos_ms,
            rates["theoretical_prefix_hit_rate"],
            rates["server_prefix_hit_rate"],
        ),
        **latency_stats(records),
        **session_counts(records),
        "ttft_by_context": ttft_by_context(records),
    }
    fields.update({f"replay_{name}": value for name, value in replay.items()})
    return msgspec.convert(fields, SessionMetrics)


def replay_counts(stats: ReplayStats) -> dict[str, int]:
    return {
        f.name: getattr(stats, f.name) for f in dataclasses.fields(stats) if f.name != "live_trees"
    }


class SessionPoint(Point):
    """A session point sent from this process: the replay's primers and lanes."""

    def __init__(
        self,
        run: RunContext,
        conc: int,
        replay: SessionReplay,
        *,
        on_record: Callable[[RequestRecord], None],
        on_warmup: Callable[[RequestRecord], None] | None = None,
        share: Share | None = None,
    ) -> None:
        share = share or Share()
        super().__init__(
            run,
            PointPlan(conc=conc, warmup=(), measured=()),
            on_record=on_record,
            on_warmup=on_warmup,
            slots=len(share.slots(conc)),
            label=share.label,
        )
        self.replay = replay

    @property
    def planned(self) -> int:
        return planned_requests(self.run.spec, self.replay.trees)

    async def warm_up(self) -> None:
        await self.replay.warmup(self._send_warmup)

    async def _measured_phase(self) -> None:
        deadline = deadline_after(self.run.spec.load.duration_s, self.run.clock())
        await self.replay.measure(self._send, deadline)


async def session_replay(
    context: RunContext,
    conc: int,
    source: SessionSource,
    tokenizer: Tokenizer,
    share: Share | None = None,
) -> SessionReplay:
    """The point's trees (drawn or loaded off the loop), their renderer and replay; a
    worker's (`share`) plays its lanes only (run/sessions.py)."""
    spec = context.spec
    share = share or Share()
    trees = await asyncio.to_thread(source.trees, conc)
    renderer = SessionRenderer(
        source.settings(), tokenizer, context.server.options, source.block_size, spec.seed + conc
    )
    options = ReplayOptions(
        conc=conc,
        duration_s=spec.load.duration_s,
        start_ratio=source.start_ratio,
        idle_cap_system_s=spec.session.idle_cap_system_s,
        idle_cap_tree_s=spec.session.idle_cap_tree_s,
        seed=spec.seed,
        run_key=zlib.crc32(context.run_id.encode()),
        # a tree's lanes are one process's, across shards as across workers
        worker=share.process,
        workers=share.processes,
    )
    return SessionReplay(
        trees, renderer, options, clock=context.clock, sleep=context.sleep, hooks=context.hooks
    )
