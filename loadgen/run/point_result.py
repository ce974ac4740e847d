"""A live point's result put together: what the run knows (identity, settings), what the
point read (counters, its processes) and what each extension adds, handed to the one
assembler (assemble.py); and run.json's facts about it for `loadgen merge`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from loadgen import __version__
from loadgen.client.server_metrics import Scrape, metrics_urls
from loadgen.config.redact import redact_url
from loadgen.metrics.server_series import PointCapture
from loadgen.metrics.submission import SubmissionRules
from loadgen.results.outcome import Stop
from loadgen.results.point import PointIdentity, PointResult, SimulatorHealth
from loadgen.results.run_record import PointFacts
from loadgen.run.assemble import PointCounts, PointParts, assemble_point
from loadgen.run.clock import ClockPair, clock_facts, read_pair
from loadgen.run.extension import Extension, Measured
from loadgen.run.point_fields import point_context, point_status, snapshot_json
from loadgen.run.point_records import PointRecords, RunContext
from loadgen.run.shapes import load_shape

if TYPE_CHECKING:
    from loadgen.run.lifecycle import Sending


def point_result(
    context: RunContext,
    conc: int,
    sending: Sending,
    stop: Stop | None,
    extensions: Sequence[Extension],
    measured: Measured,
) -> PointResult:
    spec = context.spec
    parts = PointParts(
        identity=point_identity(context),
        status=point_status(measured.complete, stop),
        counts=PointCounts(sending.planned, sending.warmup_planned, sending.warmup_failed),
        processes=[p.figures() for p in sending.processes()],
        clock_uncertainty_ms=0.0,  # one machine: every process read one CLOCK_MONOTONIC
        synthesis=context.synthesis,
        server_metrics_by_url=None,  # --server-metrics: the telemetry's part
        simulator=SimulatorHealth(),  # unknown unless loadgen started the simulator
        slice_s=spec.load.slice_duration_s,
        stages_s=[seconds for _, seconds in spec.load.conc_stages],
        rules=SubmissionRules.of(spec),
    )
    for ext in extensions:
        parts = ext.parts(parts, measured)
    # A shard's own result: the steady window is that of its own slots.
    return assemble_point(
        measured.records,
        point_context(spec, sending.slots),
        conc,
        parts,
        server_before=measured.server_before,
        server_after=measured.server_after,
    )


def point_identity(context: RunContext) -> PointIdentity:
    spec = context.spec
    return PointIdentity(
        # a shard's own file holds its share only; `loadgen merge` writes the whole point
        shard=f"{spec.processes.shard_index}/{spec.processes.shard_count}"
        if spec.processes.shard_count > 1
        else None,
        shards_merged=1,
        target=context.backend.target,
        run_id=context.run_id,
        model_id=context.server.model,
        endpoint_type="openai",
        endpoint=spec.target.endpoint,
        base_url=redact_url(context.backend.base_url),
        backend="vllm",
        # the client that timed the streams: its per-chunk cost is in client_*
        http_client=spec.target.http_client,
        input_len=spec.workload.isl,
        output_len=spec.workload.osl,
        range_ratio=spec.workload.range_ratio,
        request_rate=load_shape(spec).rate_label,
        rate_stages=[list(stage) for stage in spec.load.rate_stages] or None,
        conc_stages=list(spec.load.conc_stages) or None,
        burstiness=spec.load.burstiness,
        ramp_up_strategy=spec.load.ramp_up_strategy,
        ramp_up_start_rps=spec.load.ramp_up_start_rps,
        ramp_up_end_rps=spec.load.ramp_up_end_rps,
        loadgen_version=__version__,
        tokenizer_check=context.server.tokenize_check,
    )


def point_facts(
    context: RunContext, before: Scrape, after: Scrape | None, clock: ClockPair | None
) -> PointFacts:
    """run.json's facts for `loadgen merge`: the clock pairing and the raw counters
    before and after, summed and (--server-metrics) per URL."""
    by_url = bool(context.spec.telemetry.server_metrics)
    return PointFacts(
        clock=clock_facts(clock, read_pair()) if clock else None,
        server_before=snapshot_json(before.total),
        server_after=snapshot_json(after.total if after else None),
        server_before_by_url={u: snapshot_json(s) for u, s in before.each.items()}
        if by_url
        else None,
        server_after_by_url={u: snapshot_json(s) for u, s in after.each.items()}
        if by_url and after
        else None,
    )


def point_capture(
    context: RunContext,
    records: PointRecords,
    extensions: Sequence[Extension],
    clock: ClockPair | None,
) -> PointCapture | None:
    """--aiperf-artifacts: what the sink needs beyond the records (else None)."""
    spec = context.spec
    if spec.output.aiperf_artifacts is None:
        return None
    return PointCapture(
        warmup=tuple(records.warmup_records),
        scrapes=tuple(scrape for ext in extensions for scrape in ext.scrapes()),
        offset_ns=(clock or read_pair()).offset_ns,
        # the URLs the backend scrapes (the engine's own path, e.g. TensorRT-LLM's
        # /prometheus/metrics); a test backend without them: the configured ones
        metrics_urls=getattr(context.backend, "metrics_urls", None)
        or metrics_urls(spec.telemetry.server_metrics, context.backend.base_url),
    )
