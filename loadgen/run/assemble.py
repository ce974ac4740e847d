"""The one assembler of a point's result: the live run, its workers and `loadgen merge`.

Each producer knows different things (a live point its spec and server, a merge its
shards' files), but they all hand them over here as typed parts, and the result is built
in this one place: a part a producer does not supply is an error where it calls, never a
key missing from a file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import msgspec

from loadgen.metrics.prompt_lengths import prompt_lengths
from loadgen.metrics.server import ServerSnapshot
from loadgen.metrics.submission import SubmissionRules, submission
from loadgen.metrics.summary import PointContext, summarize
from loadgen.records import RequestRecord
from loadgen.results.point import (
    PointIdentity,
    PointResult,
    PointStatus,
    SessionMetrics,
)
from loadgen.run.client_health import client_health


@dataclass(frozen=True, slots=True)
class PointCounts:
    """Requests planned, warmup requests sent and how many of those failed."""

    planned: int
    warmup: int
    warmup_failed: int


@dataclass(frozen=True, slots=True)
class PointParts:
    """Everything besides the records that a point's result is made of."""

    identity: PointIdentity
    status: PointStatus
    counts: PointCounts
    processes: Sequence[dict[str, Any]]  # ProcessHealth.to_json() of each client process
    clock_uncertainty_ms: float | None  # 0 on one machine, None when unknown
    synthesis: tuple[str, str | None]  # how the prompts were made, and why (workload.plan)
    server_metrics_by_url: list[dict[str, Any]] | None  # None without --server-metrics
    sessions: SessionMetrics | None = None
    rules: SubmissionRules | None = None  # a scenario run's (loadgen profile --scenario)


def assemble_point(records: Sequence[RequestRecord], ctx: PointContext, conc: int,
                   parts: PointParts, *, server_before: ServerSnapshot | None,
                   server_after: ServerSnapshot | None) -> PointResult:
    """Summarize the records and put the result together. `ctx.conc` is the slots the
    records were sent from (a shard's share); `conc` is the point's concurrency."""
    metrics = summarize(records, ctx, server_before=server_before, server_after=server_after)
    metrics = msgspec.structs.replace(metrics, max_concurrency=conc)
    return PointResult(
        metrics=metrics,
        client=client_health(parts.processes, metrics.total_chunks, parts.clock_uncertainty_ms),
        identity=parts.identity,
        status=parts.status,
        prompts=prompt_lengths(records, *parts.synthesis),
        planned_requests=parts.counts.planned,
        warmup_requests=parts.counts.warmup,
        warmup_failed=parts.counts.warmup_failed,
        server_metrics_by_url=parts.server_metrics_by_url,
        sessions=parts.sessions,
        submission=None if parts.rules is None else submission(
            records, parts.rules, complete=parts.status.complete,
            error_rate=metrics.error_rate),
    )
