"""The one assembler of a point's result: the live run, its workers and `loadgen merge`.

Each producer knows different things (a live point its spec and server, a merge its
shards' files), but they all hand them over here as typed parts, and the result is built
in this one place: a part a producer does not supply is an error where it calls, never a
key missing from a file.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from loadgen.metrics.energy import PointTotals, PowerInput, point_energy
from loadgen.metrics.prompt_lengths import prompt_lengths
from loadgen.metrics.server import ServerSnapshot
from loadgen.metrics.slices import stage_slices, time_slices
from loadgen.metrics.spread import spread
from loadgen.metrics.submission import SubmissionRules, submission
from loadgen.metrics.summary import PointContext, summarize
from loadgen.metrics.throughput import measured_window
from loadgen.records import RequestRecord
from loadgen.results.point import (
    CacheState,
    ClientProcess,
    EnergyMetrics,
    FigureSpread,
    PointIdentity,
    PointResult,
    PointStatus,
    ProfileState,
    ServerRoleFigures,
    ServerUrlFigures,
    SessionMetrics,
    SimulatorHealth,
    TargetPrecisionOutcome,
    TrialSpread,
    TtftParts,
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
    processes: Sequence[ClientProcess]  # ProcessHealth.figures() of each client process
    clock_uncertainty_ms: float | None  # 0 on one machine, None when unknown
    synthesis: tuple[str, str | None]  # how the prompts were made, and why (workload.plan)
    server_metrics_by_url: list[ServerUrlFigures] | None  # None without --server-metrics
    simulator: SimulatorHealth  # the embedded simulator's lateness (unknown: all None)
    sessions: SessionMetrics | None = None
    power: PowerInput | None = None  # --gpu-metrics samples of the point
    slice_s: float | None = None  # --slice-duration: the time slices' length
    kv_samples: Sequence[tuple[int, float]] = ()  # (perf_counter_ns, KV-cache usage) seen
    stages_s: Sequence[float] = ()  # --conc-stages: each stage's seconds, for its figures
    rules: SubmissionRules | None = None  # a scenario run's (loadgen profile --scenario)
    cache: CacheState = field(default_factory=CacheState)  # --reset-prefix-cache: its outcome
    profile: ProfileState = field(default_factory=ProfileState)  # --profile-conc: its window
    server_metrics_by_role: list[ServerRoleFigures] | None = None  # --server-metrics ROLE=
    ttft_parts: TtftParts | None = None  # a disaggregated run's (features/ttft_parts.py)
    target_precision: TargetPrecisionOutcome | None = None  # features/target_precision.py


def assemble_point(
    records: Sequence[RequestRecord],
    ctx: PointContext,
    conc: int,
    parts: PointParts,
    *,
    server_before: ServerSnapshot | None,
    server_after: ServerSnapshot | None,
) -> PointResult:
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
        server_metrics_by_role=parts.server_metrics_by_role,
        ttft_parts=parts.ttft_parts,
        target_precision=parts.target_precision,
        simulator=parts.simulator,
        cache=parts.cache,
        profile=parts.profile,
        sessions=parts.sessions,
        energy=_energy(parts.power, records, metrics) if parts.power is not None else None,
        slices=(
            time_slices(records, parts.slice_s, parts.kv_samples)
            if parts.slice_s is not None
            else None
        ),
        stage_slices=stage_slices(records, parts.stages_s, parts.kv_samples)
        if parts.stages_s
        else None,
        submission=None
        if parts.rules is None
        else submission(
            records, parts.rules, complete=parts.status.complete, error_rate=metrics.error_rate
        ),
    )


def _energy(
    power: PowerInput, records: Sequence[RequestRecord], metrics: PointMetrics
) -> EnergyMetrics:
    """Over the window `duration` spans, per the counts the result file carries."""
    totals = PointTotals(metrics.completed, metrics.total_input_tokens, metrics.total_output_tokens)
    return point_energy(
        power.series,
        measured_window(records),
        totals,
        interval_s=power.interval_s,
        expected_gpus=power.expected_gpus,
    )


# --trials: the figures each trial's value is kept of, with their spread (PointMetrics
# names). Throughput, interactivity, TTFT/TPOT/ITL p50 and p99, AL: what a point is
# published with.
HEADLINE_FIGURES = (
    "request_throughput",
    "output_throughput",
    "output_throughput_per_gpu",
    "median_interactivity_tok_s_user",
    "median_ttft_ms",
    "p99_ttft_ms",
    "median_tpot_ms",
    "p99_tpot_ms",
    "median_itl_ms",
    "p99_itl_ms",
    "acceptance_length",
)
CI_METHOD = "student_t_95"


@dataclass(frozen=True, slots=True)
class TrialPart:
    """One finished trial of a point: its own result, records, seed and file name."""

    result: PointResult
    records: Sequence[RequestRecord]
    seed: int
    file: str


def figure_spread(values: Sequence[float | None]) -> FigureSpread:
    present = [v for v in values if v is not None]
    if not present:
        return FigureSpread(
            values=list(values),
            n=0,
            mean=None,
            std=None,
            cv=None,
            ci_low=None,
            ci_high=None,
            ci_half_width=None,
            wide=True,
        )
    s = spread(present)
    half = None if s.ci_high is None else s.ci_high - s.mean
    return FigureSpread(
        values=list(values),
        n=s.n,
        mean=s.mean,
        std=s.std,
        cv=s.cv,
        ci_low=s.ci_low,
        ci_high=s.ci_high,
        ci_half_width=half,
        wide=s.wide,
    )


def trial_spread(trials: Sequence[TrialPart]) -> TrialSpread:
    """Each headline figure's trial values and their Student-t interval."""
    return TrialSpread(
        trials=len(trials),
        trial_seeds=[t.seed for t in trials],
        trial_files=[t.file for t in trials],
        trial_ci_method=CI_METHOD,
        trial_spread={
            name: figure_spread([getattr(t.result.metrics, name) for t in trials])
            for name in HEADLINE_FIGURES
        },
    )


def end_to_end(per_trial: Sequence[Sequence[RequestRecord]]) -> list[RequestRecord]:
    """The trials' records laid end to end on one clock, ids renumbered: trial k+1 starts
    where trial k's last request ended, so a rate over the pooled records is tokens over
    the sum of the trials' measured durations (the time between trials, their warmups,
    counts in no figure). The files keep every record as it was measured."""
    pooled: list[RequestRecord] = []
    at_ns: int | None = None
    next_id = 0
    for records in per_trial:
        if not records:
            continue
        first = min(r.start_ns for r in records)
        shift = 0 if at_ns is None else at_ns - first
        pooled += [_moved(r, shift, next_id + r.request_id) for r in records]
        at_ns = max(r.end_ns for r in records) + shift
        next_id += max(r.request_id for r in records) + 1
    return pooled


def _moved(record: RequestRecord, by_ns: int, request_id: int) -> RequestRecord:
    return dataclasses.replace(
        record,
        request_id=request_id,
        scheduled_ns=record.scheduled_ns + by_ns,
        start_ns=record.start_ns + by_ns,
        chunk_ns=tuple(t + by_ns for t in record.chunk_ns),
        end_ns=record.end_ns + by_ns,
        clock_mono_ns=record.clock_mono_ns + by_ns,
    )


def assemble_trials(
    trials: Sequence[TrialPart],
    ctx: PointContext,
    conc: int,
    *,
    server_before: ServerSnapshot | None,
    server_after: ServerSnapshot | None,
) -> PointResult:
    """The point pooled over its trials: every figure from all trials' records (laid end
    to end), plus each headline figure's spread over the trials. `server_*` are the
    trials' counter deltas summed (None when a trial's are not known)."""
    last = trials[-1].result
    processes = [
        msgspec.structs.replace(p, process=f"trial {k}: {p.process}")
        for k, t in enumerate(trials, 1)
        for p in t.result.client.client_processes
    ]
    stopped = next((t.result.status for t in trials if not t.result.status.complete), None)
    uncertain = [t.result.client.clock_alignment_uncertainty_ms for t in trials]
    parts = PointParts(
        identity=last.identity,
        status=stopped or last.status,
        counts=PointCounts(
            sum(t.result.planned_requests for t in trials),
            sum(t.result.warmup_requests for t in trials),
            sum(t.result.warmup_failed for t in trials),
        ),
        processes=processes,
        clock_uncertainty_ms=None if None in uncertain else max(u or 0.0 for u in uncertain),
        synthesis=(last.prompts.prompt_synthesis, last.prompts.prompt_synthesis_note),
        server_metrics_by_url=None,  # per URL: in each trial's own file
        simulator=SimulatorHealth.combined([t.result.simulator for t in trials]),
        cache=CacheState.combined([t.result.cache for t in trials]),
        profile=ProfileState.combined([t.result.profile for t in trials]),
    )
    pooled = assemble_point(
        end_to_end([t.records for t in trials]),
        ctx,
        conc,
        parts,
        server_before=server_before,
        server_after=server_after,
    )
    return msgspec.structs.replace(pooled, trials=trial_spread(trials))
