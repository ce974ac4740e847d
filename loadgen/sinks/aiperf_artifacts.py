"""One point as NVIDIA AIPerf's three artifact files, for InferenceX's agentic aggregation
(utils/agentic/aggregation/process_agentic_result.py reads RESULT_DIR/aiperf_artifacts/).

Every value is loadgen's own, spelled in AIPerf's keys and units here only:
- profile_export.jsonl: one line per request, warmup (primers) first with
  `metadata.benchmark_phase` "warmup", then the measured ones ("profiling"). Per
  completed request `metrics.<name>.value`: time_to_first_token, request_latency (E2EL),
  inter_token_latency (loadgen's per-request TPOT, which is what AIPerf calls ITL; not for
  1-token outputs), output_token_throughput_per_user (loadgen's interactivity),
  input_sequence_length (loadgen's input_len, what its throughput counts),
  output_sequence_length; each from metrics/summary.latency_samples, the arrays the
  point's own percentiles come from. A failed request has `error` {code: HTTP status,
  type: loadgen's failure kind, message} and `error_isl` only. Start and end are the
  request's perf_counter stamps on the wall clock (the point's clock pair), so any
  duration between them is loadgen's.
- profile_export_aiperf.json: the point's figures as AIPerf aggregates ({unit, avg, p50,
  ..., std}), `theoretical_prefix_cache_hit` (session runs: sum = theoretical cached
  tokens, count = prompt tokens sent, so sum / count, which InferenceX reads, is
  loadgen's theoretical_prefix_hit_rate; avg the same in %), and `metadata.dataset`.
- server_metrics_export.json: metrics/server_series.py's series, with `endpoint_url`,
  each metric's HELP text as its `description`, and the summary's `start_time` /
  `end_time` (the first and last scrape, UTC): AIPerf 0.13.0's ServerMetricsExportData
  (schema 1.1) requires them. A counter slice without a rate (two scrapes at one
  instant) is left out: AIPerf's slices carry numbers only.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson

from loadgen.config.redact import redact_url
from loadgen.config.spec import RunSpec
from loadgen.metrics.arrays import PointArrays, is_completed
from loadgen.metrics.checks import failure_kind
from loadgen.metrics.server_series import ScrapeText, build_series, series_stats, slices
from loadgen.metrics.summary import latency_samples
from loadgen.records import ErrorKind, RequestRecord
from loadgen.results.files import write_atomic
from loadgen.results.point import PointResult
from loadgen.results.store import AiperfArtifacts

SCHEMA_VERSION = "1.0"
SERVER_METRICS_SCHEMA_VERSION = "1.1"  # AIPerf 0.13.0's ServerMetricsExportData
# loadgen's point field stem -> AIPerf's metric name, unit
AGGREGATES = (
    ("ttft", "time_to_first_token", "ms"),
    ("e2el", "request_latency", "ms"),
    ("tpot", "inter_token_latency", "ms"),
    ("interactivity", "output_token_throughput_per_user", "tokens/sec/user"),
)
RATES = (
    ("request_throughput", "request_throughput", "requests/sec"),
    ("output_throughput", "output_token_throughput", "tokens/sec"),
    ("total_token_throughput", "total_token_throughput", "tokens/sec"),
)


@dataclass(frozen=True, slots=True)
class ArtifactRun:
    """What the files say about the run beyond the point's records and result."""

    run_id: str
    model: str
    dataset: Path | None
    dataset_format: str
    urls: tuple[str, ...]
    series_interval_s: float
    offset_ns: int  # add to a perf_counter_ns reading for wall-clock ns

    @classmethod
    def of(
        cls, spec: RunSpec, run_id: str, model: str, urls: Sequence[str], offset_ns: int
    ) -> ArtifactRun:
        return cls(
            run_id=run_id,
            model=model,
            dataset=spec.workload.dataset,
            dataset_format=spec.workload.dataset_format,
            urls=tuple(redact_url(u) for u in urls),
            series_interval_s=spec.telemetry.series_interval_s,
            offset_ns=offset_ns,
        )


def _metric(value: float | int, unit: str) -> dict[str, Any]:
    return {"value": value, "unit": unit}


def _completed_metrics(records: Sequence[RequestRecord]) -> list[dict[str, Any]]:
    """Per completed record (in the given order), AIPerf's metrics block."""
    if not records:
        return []
    arrays = PointArrays.build(records)
    samples = latency_samples(arrays)
    multi = (arrays.output_tokens > 1).tolist()
    tpots = iter(samples["tpot"].tolist())
    blocks = []
    for i, record in enumerate(records):
        block = {
            "input_sequence_length": _metric(record.input_len, "tokens"),
            "output_sequence_length": _metric(int(arrays.output_tokens[i]), "tokens"),
            "time_to_first_token": _metric(float(samples["ttft"][i]), "ms"),
            "request_latency": _metric(float(samples["e2el"][i]), "ms"),
        }
        if multi[i]:
            tpot = next(tpots)
            block["inter_token_latency"] = _metric(tpot, "ms")
            if tpot > 0:  # loadgen's interactivity leaves a zero TPOT out, so does this
                block["output_token_throughput_per_user"] = _metric(
                    1000.0 / tpot, "tokens/sec/user"
                )
        blocks.append(block)
    return blocks


def _error(record: RequestRecord) -> dict[str, Any]:
    return {
        "code": record.status,
        "type": failure_kind(record) or "unknown",
        # AIPerf's ErrorDetails requires a message: the kind when loadgen kept no detail
        "message": record.error_detail or failure_kind(record) or "request failed",
    }


def _metadata(record: RequestRecord, phase: str, index: int, offset_ns: int) -> dict[str, Any]:
    offset = record.clock_unix_ns - record.clock_mono_ns if record.clock_mono_ns else offset_ns
    cancelled = record.error is ErrorKind.CANCELLED
    # a request of a non-session run is a one-turn session of its own, as AIPerf writes
    # single-turn runs (its swim-lane groups by these ids: null would make one session)
    session = record.session_id or f"request-{index}"
    return {
        "session_num": index,
        "x_correlation_id": session,
        # the trace's own id (and ::sa subagent suffix), without loadgen's play label
        "conversation_id": session.split(":", 1)[1] if ":" in session else session,
        "turn_index": record.turn_index or 0,
        "request_start_ns": record.start_ns + offset,
        "request_ack_ns": None,  # loadgen does not stamp the response headers
        "request_end_ns": record.end_ns + offset,
        "worker_id": "loadgen",
        "record_processor_id": "loadgen",  # required by AIPerf's MetricRecordMetadata
        "benchmark_phase": phase,
        "was_cancelled": cancelled,
        "cancellation_time_ns": record.end_ns + offset if cancelled else None,
    }


def record_lines(
    records: Sequence[RequestRecord], phase: str, run: ArtifactRun, first_index: int = 0
) -> list[bytes]:
    done = [r for r in records if is_completed(r)]
    blocks = dict(zip((id(r) for r in done), _completed_metrics(done), strict=True))
    lines = []
    for n, record in enumerate(records):
        block = blocks.get(id(record))
        lines.append(
            orjson.dumps(
                {
                    "metadata": _metadata(record, phase, first_index + n, run.offset_ns),
                    "metrics": block
                    if block is not None
                    else {"error_isl": _metric(record.input_len, "tokens")},
                    "error": None if block is not None else _error(record),
                }
            )
        )
    return lines


def _stats(flat: Mapping[str, Any], stem: str, unit: str) -> dict[str, Any] | None:
    suffix = f"_{stem}_{'tok_s_user' if stem == 'interactivity' else 'ms'}"
    if flat.get(f"mean{suffix}") is None:
        return None
    out: dict[str, Any] = {
        "unit": unit,
        "avg": flat[f"mean{suffix}"],
        "p50": flat[f"median{suffix}"],
        "std": flat[f"std{suffix}"],
    }
    for key, value in flat.items():
        if key.startswith("p") and key.endswith(suffix) and value is not None:
            out[key[: -len(suffix)]] = value
    return out


def aggregate(result: PointResult, run: ArtifactRun) -> dict[str, Any]:
    flat = result.to_json()
    out: dict[str, Any] = {
        "request_count": {"unit": "requests", "avg": flat["completed"]},
        "error_request_count": {"unit": "requests", "avg": flat["failed"]},
        "benchmark_duration": {"unit": "sec", "avg": flat["duration"]},
    }
    for stem, name, unit in AGGREGATES:
        stats = _stats(flat, stem, unit)
        if stats is not None:
            out[name] = stats
    for field, name, unit in RATES:
        if flat.get(field) is not None:
            out[name] = {"unit": unit, "avg": flat[field]}
    sessions = result.sessions
    if sessions is not None and sessions.theoretical_prefix_hit_rate is not None:
        out["theoretical_prefix_cache_hit"] = {
            "unit": "%",
            "avg": 100.0 * sessions.theoretical_prefix_hit_rate,
            "sum": sessions.theoretical_cached_tokens,
            "count": sessions.prompt_tokens_sent,
        }
    dataset = (
        None
        if run.dataset is None
        else {"source_type": "local_file", "path": str(run.dataset), "format": run.dataset_format}
    )
    out["metadata"] = {
        "benchmark_tool": "loadgen",
        "loadgen_version": result.identity.loadgen_version,
        "run_id": run.run_id,
        "model": run.model,
        "concurrency": result.conc,
        "dataset": dataset,
    }
    return out


def server_metrics(
    scrapes: Sequence[ScrapeText], run: ArtifactRun, records: Sequence[RequestRecord] = ()
) -> dict[str, Any]:
    """`records`: the point's, whose span is the summary's when nothing was scraped."""
    metrics: dict[str, dict[str, Any]] = {}
    for series in build_series(scrapes):
        stats = series_stats(series)
        entry = metrics.setdefault(
            series.name,
            {"type": series.kind, "description": series.description, "series": []},
        )
        keys = ("total", "rate") if series.kind == "counter" else ("avg", "min", "max")
        entry["series"].append(
            {
                "endpoint_url": series.url,
                "labels": dict(series.labels),
                "stats": {k: getattr(stats, k) for k in keys},
                "timeslices": [
                    _slice(s, series.kind, run.offset_ns)
                    for s in slices(series)
                    if series.kind != "counter" or (s.total is not None and s.rate is not None)
                ],
            }
        )
    start_ns, end_ns = _span(scrapes, records, run.offset_ns)
    return {
        "schema_version": SERVER_METRICS_SCHEMA_VERSION,
        "summary": {
            "endpoints_configured": list(run.urls),
            "endpoints_successful": sorted({s.url for s in scrapes}),
            "start_time": _utc(start_ns),
            "end_time": _utc(end_ns),
            "slice_duration": run.series_interval_s,
        },
        "metrics": metrics,
    }


def _span(
    scrapes: Sequence[ScrapeText], records: Sequence[RequestRecord], offset_ns: int
) -> tuple[int, int]:
    """Wall-clock ns of the first and last scrape (else of the records' starts and ends)."""
    stamps = [s.ns for s in scrapes] or [t for r in records for t in (r.start_ns, r.end_ns)]
    if not stamps:
        return offset_ns, offset_ns
    return min(stamps) + offset_ns, max(stamps) + offset_ns


def _utc(unix_ns: int) -> str:
    return datetime.fromtimestamp(unix_ns / 1e9, UTC).isoformat()


def _slice(part: Any, kind: str, offset_ns: int) -> dict[str, Any]:
    out: dict[str, Any] = {"start_ns": part.start_ns + offset_ns, "end_ns": part.end_ns + offset_ns}
    if kind == "counter":
        out.update(total=part.total, rate=part.rate)
    else:
        out.update(avg=part.value, min=part.value, max=part.value)
    return out


def write_aiperf_artifacts(
    where: AiperfArtifacts,
    result: PointResult,
    records: Sequence[RequestRecord],
    warmup: Sequence[RequestRecord],
    scrapes: Sequence[ScrapeText],
    run: ArtifactRun,
) -> None:
    """The three files of one point (each atomically; ResultsWriteError if one fails)."""
    measured = sorted(records, key=lambda r: r.start_ns)
    lines = record_lines(warmup, "warmup", run)
    lines += record_lines(measured, "profiling", run, first_index=len(lines))
    write_atomic(where.records_file, b"".join(line + b"\n" for line in lines))
    option = orjson.OPT_INDENT_2 | orjson.OPT_APPEND_NEWLINE
    write_atomic(where.aggregate_file, orjson.dumps(aggregate(result, run), option=option))
    write_atomic(
        where.server_metrics_file,
        orjson.dumps(server_metrics(scrapes, run, [*warmup, *measured]), option=option),
    )
