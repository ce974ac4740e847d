"""--aiperf-artifacts in the shapes AIPerf's own tools validate (`aiperf plot`, `aiperf
analyze swim-lane`), pinned from AIPerf 0.13.0's pydantic models as installed from the
package index (aiperf/common/models/record_models.py: MetricRecordInfo,
MetricRecordMetadata, MetricValue; error_models.py: ErrorDetails; export_models.py:
JsonExportData, JsonMetricResult; server_metrics_models.py: ServerMetricsExportData,
ServerMetricsSummary, Counter/GaugeMetricData, Counter/GaugeSeries, Counter/GaugeStats,
Counter/GaugeTimeslice). AIPerf itself is not needed here: the required fields and their
types are written out below.

Before: every profile_export.jsonl line lacked `metadata.record_processor_id`, so
`aiperf plot` found "No valid records"; a failed request without a detail had a null
`error.message`; a non-session run's null `x_correlation_id`/`conversation_id` made
swim-lane one session of every request. server_metrics_export.json lacked the summary's
`start_time`/`end_time` and every metric's `description` (201 validation errors: `aiperf
plot` logged "Failed to load server metrics from JSON" and drew none of them).
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.config.args import spec_from_argv
from loadgen.metrics.server_series import ScrapeText
from loadgen.orchestrate.measure import measure
from loadgen.records import ErrorKind
from loadgen.sinks.aiperf_artifacts import ArtifactRun, record_lines, server_metrics
from loadgen.tokenizer import load_tokenizer
from tests.support.fake_records import make_record

# AIPerf 0.13.0 MetricRecordMetadata: required fields (Field(...)) and their types
METADATA_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "session_num": int,
    "request_start_ns": int,
    "request_end_ns": int,
    "worker_id": str,
    "record_processor_id": str,
    "benchmark_phase": str,  # CreditPhase: "warmup" | "profiling"
}
# ... and the optional ones loadgen writes, with the types AIPerf 0.13.0 accepts
METADATA_OPTIONAL: dict[str, tuple[type, ...]] = {
    "x_request_id": (str, type(None)),
    "x_correlation_id": (str, type(None)),
    "conversation_id": (str, type(None)),
    "turn_index": (int, type(None)),
    "request_ack_ns": (int, type(None)),
    "was_cancelled": (bool,),
    "cancellation_time_ns": (int, type(None)),
}
CREDIT_PHASES = {"warmup", "profiling"}
# AIPerf 0.13.0 JsonMetricResult: `unit` required, these optional numbers (count an int)
JSON_METRIC_STATS = {
    *("avg", "p1", "p5", "p10", "p25", "p50", "p75", "p90", "p95", "p99"),
    *("min", "max", "std", "count", "sum"),
}


def check_record(line: dict[str, Any]) -> None:
    """One profile_export.jsonl line as AIPerf 0.13.0's MetricRecordInfo validates it."""
    assert {"metadata", "metrics"} <= set(line)
    meta = line["metadata"]
    for name, kind in METADATA_REQUIRED.items():
        assert isinstance(meta.get(name), kind) and not isinstance(meta[name], bool), name
    assert meta["benchmark_phase"] in CREDIT_PHASES
    for name, kinds in METADATA_OPTIONAL.items():
        if name in meta:
            assert isinstance(meta[name], kinds), name
    # MetricValue: {value: int | float | list[int|float], unit: str}
    assert isinstance(line["metrics"], dict) and line["metrics"]
    for name, metric in line["metrics"].items():
        assert set(metric) == {"value", "unit"}, name
        assert isinstance(metric["unit"], str)
        assert isinstance(metric["value"], int | float) and not isinstance(metric["value"], bool)
    # ErrorDetails | None: `message` a required str; code int | None, type str | None
    error = line.get("error")
    if error is not None:
        assert isinstance(error["message"], str)
        assert error.get("code") is None or isinstance(error["code"], int)
        assert error.get("type") is None or isinstance(error["type"], str)


def check_aggregate(data: dict[str, Any]) -> None:
    """profile_export_aiperf.json as AIPerf 0.13.0's JsonExportData (extra="allow")
    validates it: every metric ({... "unit" ...}) a JsonMetricResult."""
    metrics = {k: v for k, v in data.items() if isinstance(v, dict) and "unit" in v}
    assert {"request_count", "time_to_first_token", "request_latency"} <= set(metrics)
    for name, metric in metrics.items():
        assert isinstance(metric["unit"], str), name
        # other keys (loadgen's p99.9) are extras, which the model allows
        assert {"avg"} <= set(metric) - {"unit"}, name
        for stat, value in metric.items():
            if stat == "count":
                assert value is None or (isinstance(value, int) and not isinstance(value, bool))
            elif stat != "unit":
                assert value is None or isinstance(value, int | float), (name, stat)
        assert JSON_METRIC_STATS & set(metric), name


# AIPerf 0.13.0 ServerMetricsExportData: its metric types, the stats each series type
# may have (floats or None), and the numbers each timeslice type requires
SERVER_METRIC_TYPES = {"counter", "gauge", "histogram", "unknown"}
SERIES_STATS = {
    "counter": {"total", "rate", "rate_avg", "rate_min", "rate_max", "rate_std"},
    "gauge": {"avg", "min", "max", "std", "p1", "p5", "p10", "p25", "p50", "p75", "p90"}
    | {"p95", "p99"},
}
SLICE_REQUIRED = {"counter": {"total", "rate"}, "gauge": {"avg", "min", "max"}}


def is_number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_server_metrics(data: dict[str, Any]) -> None:
    """server_metrics_export.json as AIPerf 0.13.0's ServerMetricsExportData validates it
    (extra="allow": loadgen's `slice_duration` is an extra)."""
    assert isinstance(data.get("schema_version", ""), str)
    summary = data["summary"]
    for name in ("endpoints_configured", "endpoints_successful"):
        assert all(isinstance(url, str) for url in summary[name]), name
    for name in ("start_time", "end_time"):  # required datetimes
        assert datetime.fromisoformat(summary[name]).tzinfo is not None, name
    assert summary["start_time"] <= summary["end_time"]
    assert data["metrics"]
    for name, metric in data["metrics"].items():
        kind = metric["type"]
        assert kind in SERVER_METRIC_TYPES, name
        assert isinstance(metric["description"], str), name  # required (HELP text)
        assert metric.get("unit") is None or isinstance(metric["unit"], str), name
        for series in metric["series"]:
            assert series.get("endpoint_url") is None or isinstance(series["endpoint_url"], str)
            labels = series.get("labels") or {}
            assert all(isinstance(k, str) and isinstance(v, str) for k, v in labels.items())
            stats = series.get("stats") or {}
            assert set(stats) <= SERIES_STATS[kind], (name, set(stats))
            assert all(v is None or is_number(v) for v in stats.values()), (name, stats)
            for part in series.get("timeslices") or []:
                assert isinstance(part["start_ns"], int) and isinstance(part["end_ns"], int)
                for required in SLICE_REQUIRED[kind]:
                    assert is_number(part.get(required)), (name, required, part)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


async def test_a_runs_artifacts_validate_as_aiperf_0_13_models(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    artifacts = tmp_path / "aiperf"
    spec = spec_from_argv(
        [
            "--sim",
            "--sim-args",
            "--step-fixed-ms 2 --decode-token-us 20 --spin-us 0",
            *("--conc", "4", "--isl", "64", "--osl", "64", "--prompts-per-conc", "3"),
            *("--results", str(tmp_path / "results"), "--no-progress"),
            *("--aiperf-artifacts", str(artifacts)),
        ],
        env={},
    )
    outcome = await measure(spec, tokenizer=tokenizer)
    assert outcome.exit_code == 0
    rows = [orjson.loads(x) for x in (artifacts / "profile_export.jsonl").read_bytes().splitlines()]
    phases = [row["metadata"]["benchmark_phase"] for row in rows]
    assert phases.count("profiling") == 12 and phases.count("warmup") >= 1
    for row in rows:
        check_record(row)
    # each request of a run without sessions is a session of its own (swim-lane's lanes)
    ids = [row["metadata"]["x_correlation_id"] for row in rows]
    assert len(set(ids)) == len(rows)
    assert all(row["metadata"]["conversation_id"] for row in rows)
    check_aggregate(orjson.loads((artifacts / "profile_export_aiperf.json").read_bytes()))
    server = orjson.loads((artifacts / "server_metrics_export.json").read_bytes())
    check_server_metrics(server)
    assert server["metrics"]["vllm:generation_tokens"]["description"]  # the sim's HELP text


def test_a_failed_request_without_detail_has_an_error_message() -> None:
    record = make_record(
        0, offsets_ns=(), tokens=(), error=ErrorKind.HTTP, status=503, error_detail=""
    )
    run = ArtifactRun("r", "m", None, "auto", (), 1.0, 0)
    row = orjson.loads(record_lines([record], "profiling", run)[0])
    check_record(row)
    assert row["error"]["message"] == row["error"]["type"] == "http"


def test_server_metrics_without_a_rate_or_a_scrape_still_validate() -> None:
    """Two scrapes at one instant give a counter slice without a rate (AIPerf's slices
    carry numbers only: left out); without scrapes the span is the records'."""
    text = "# HELP c_total A counter.\n# TYPE c_total counter\nc_total 1.0\n"
    run = ArtifactRun("r", "m", None, "auto", ("http://s/metrics",), 1.0, 1_000)
    scrapes = [ScrapeText("http://s/metrics", 5_000, text)] * 2
    data = server_metrics(scrapes, run)
    check_server_metrics(data)
    assert data["metrics"]["c"]["series"][0]["timeslices"] == []
    assert data["metrics"]["c"]["description"] == "A counter."
    record = make_record(0, offsets_ns=(10, 20), tokens=(1, 1))
    bare = server_metrics([], run, [record])
    assert bare["summary"]["start_time"] <= bare["summary"]["end_time"]
    assert bare["metrics"] == {}
