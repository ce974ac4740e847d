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

from loadgen.metrics.energy import PointTotals, PowerInput, point_energy
from loadgen.metrics.prompt_lengths import prompt_lengths
from loadgen.metrics.server import ServerSnapshot
from loadgen.metrics.slices import time_slices
from loadgen.metrics.summary import PointContext, summarize
from loadgen.metrics.throughput import measured_window
from loadgen.records import RequestRecord
from loadgen.results.point import (
    EnergyMetrics,
    PointIdentity,
    PointResult,
    PointStatus,
    SessionMetrics,
    SimulatorHealth,
)
from loadgen.results.point_metrics import PointMetrics
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
    simulator: SimulatorHealth  # the embedded simulator's lateness (unknown: all None)
    sessions: SessionMetrics | None = None
    power: PowerInput | None = None  # --gpu-metrics samples of the point
    slice_s: float | None = None  # --slice-duration: the time slices' length
    kv_samples: Sequence[tuple[int, float]] = ()  # (perf_counter_ns, KV-cache usage) seen


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
        simulator=parts.simulator,
        sessions=parts.sessions,
        energy=_energy(parts.power, records, metrics) if parts.power is not None else None,
        slices=(time_slices(records, parts.slice_s, parts.kv_samples)
                if parts.slice_s is not None else None),
    )


def _energy(power: PowerInput, records: Sequence[RequestRecord],
            metrics: PointMetrics) -> EnergyMetrics:
    """Over the window `duration` spans, per the counts the result file carries."""
    totals = PointTotals(metrics.completed, metrics.total_input_tokens,
                         metrics.total_output_tokens)
    return point_energy(power.series, measured_window(records), totals,
                        interval_s=power.interval_s, expected_gpus=power.expected_gpus)
