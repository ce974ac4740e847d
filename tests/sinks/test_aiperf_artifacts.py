"""--aiperf-artifacts: AIPerf's three files, in the shapes and with the keys InferenceX's
utils/agentic/aggregation reads (request_metrics.py, server_metrics.py,
backends/vllm.py at InferenceX 843c6254), holding loadgen's own figures.

The end-to-end test replays a trace against the real simulator (prefix caching on) and
recomputes, from the artifact files only, what InferenceX computes from them (its
throughput: token sums over max end - min start of the profiled records; its hit
rates: sum / count, hits / queries over every series); each must equal loadgen's own
result file. The pure tests pin the series statistics and the error record.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.config.args import spec_from_argv
from loadgen.metrics.server_series import ScrapeText, build_series, series_stats, slices
from loadgen.orchestrate.measure import measure
from loadgen.records import ErrorKind, RequestRecord
from loadgen.results.jsonl import read_jsonl
from loadgen.results.store import AiperfArtifacts
from loadgen.sinks.aiperf_artifacts import ArtifactRun, record_lines
from loadgen.tokenizer import load_tokenizer
from tests.support.fake_records import MS, make_record
from tests.support.paths import TRACES

SIM = "--enable-prompt-tokens-details --block-size 64 --spec-tokens 0 --step-fixed-ms 1"
RECORD_METRICS = (
    "time_to_first_token",
    "inter_token_latency",
    "request_latency",
    "input_sequence_length",
    "output_sequence_length",
)


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    return load_tokenizer()


def lines(path: Path) -> list[dict[str, Any]]:
    return [orjson.loads(line) for line in path.read_bytes().splitlines() if line.strip()]


def value(row: dict[str, Any], name: str) -> Any:
    return row["metrics"][name]["value"]


async def test_trace_replay_artifacts_hold_loadgen_figures(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    artifacts = tmp_path / "result" / "aiperf_artifacts"
    spec = spec_from_argv(
        [
            "--sim",
            "--sim-args",
            SIM,
            "--results",
            str(tmp_path / "run"),
            "--no-progress",
            "--seed",
            "5",
            "--conc",
            "2",
            "--dataset",
            str(TRACES / "agentic_small.jsonl"),
            "--aiperf-artifacts",
            str(artifacts),
            "--slo",
            "ttft=60s",
        ]
    )
    assert (await measure(spec, tokenizer=tokenizer)).exit_code == 0
    point = orjson.loads((tmp_path / "run" / "conc_2.json").read_bytes())
    records = read_jsonl(tmp_path / "run" / "requests_conc_2.jsonl")
    where = AiperfArtifacts.for_point(artifacts, 2, 1)
    rows = lines(where.records_file)

    phases = [row["metadata"]["benchmark_phase"] for row in rows]
    assert phases.count("warmup") == point["replay_primers"] >= 1  # the primers
    assert phases.count("profiling") == len(records) == point["completed"]
    profiled = [row for row in rows if row["metadata"]["benchmark_phase"] == "profiling"]
    assert all(row["error"] is None for row in rows)
    assert all(
        name in row["metrics"]
        for row in profiled
        for name in RECORD_METRICS
        if name != "inter_token_latency"
    )

    # per request: loadgen's own stamps, on one wall clock (durations unchanged)
    by_start = sorted(records, key=lambda r: r.start_ns)
    for row, record in zip(profiled, by_start, strict=True):
        meta = row["metadata"]
        assert meta["request_end_ns"] - meta["request_start_ns"] == record.end_ns - record.start_ns
        assert value(row, "time_to_first_token") == (record.chunk_ns[0] - record.start_ns) / 1e6
        assert value(row, "request_latency") == (record.chunk_ns[-1] - record.start_ns) / 1e6
        assert value(row, "input_sequence_length") == record.input_len
        assert value(row, "output_sequence_length") == record.output_tokens
        assert meta["x_correlation_id"] == record.session_id
        assert meta["turn_index"] == record.turn_index

    # InferenceX's throughput and latency percentiles from these rows = loadgen's
    starts = [row["metadata"]["request_start_ns"] for row in profiled]
    ends = [row["metadata"]["request_end_ns"] for row in profiled]
    tokens = sum(
        value(r, "input_sequence_length") + value(r, "output_sequence_length") for r in profiled
    )
    assert tokens / ((max(ends) - min(starts)) / 1e9) == pytest.approx(
        point["total_token_throughput"], rel=1e-12
    )
    ttfts = [value(r, "time_to_first_token") for r in profiled]
    assert float(np.percentile(ttfts, 90)) == pytest.approx(point["p90_ttft_ms"], rel=1e-12)
    itls = [
        value(r, "inter_token_latency") for r in profiled if "inter_token_latency" in r["metrics"]
    ]
    assert float(np.percentile(itls, 50)) == pytest.approx(point["median_tpot_ms"], rel=1e-12)

    aggregate = orjson.loads(where.aggregate_file.read_bytes())
    theory = aggregate["theoretical_prefix_cache_hit"]
    assert theory["sum"] / theory["count"] == point["theoretical_prefix_hit_rate"] > 0
    assert aggregate["metadata"]["dataset"]["path"].endswith("agentic_small.jsonl")
    assert aggregate["time_to_first_token"]["p90"] == point["p90_ttft_ms"]

    server = orjson.loads(where.server_metrics_file.read_bytes())
    [url] = server["summary"]["endpoints_configured"]
    metrics = server["metrics"]
    series = {
        name: metrics[name]["series"]
        for name in ("vllm:prefix_cache_hits", "vllm:prefix_cache_queries")
    }
    assert all(s["endpoint_url"] == url for group in series.values() for s in group)
    hits, queries = (sum(s["stats"]["total"] for s in series[name]) for name in series)
    assert hits == point["server_prefix_cache_hits"] > 0
    assert queries == point["server_prefix_cache_queries"]
    for s in series["vllm:prefix_cache_hits"]:
        assert sum(part["total"] for part in s["timeslices"]) == s["stats"]["total"]
    assert metrics["vllm:kv_cache_usage_perc"]["type"] == "gauge"

    # the session rollups of the same replay (metrics/session_rollup.py)
    sessions = point["session_rollup"]["turns"]
    assert sessions["mean"] * point["session_ids"] == pytest.approx(len(records))
    assert point["tree_rollup"]["turns"]["mean"] * point["session_trees"] == pytest.approx(
        len(records)
    )
    assert point["good_sessions"] == point["session_ids"]  # nothing near a 60 s TTFT
    assert point["prefix_cache_loss"] == pytest.approx(
        point["theoretical_prefix_hit_rate"] - point["server_prefix_hit_rate"]
    )
    bins = point["prefix_cache_loss_by_context"]
    assert sum(row["requests"] for row in bins) == point["client_cached_requests"] > 0
    over_time = point["prefix_cache_loss_over_time"]
    assert sum(row["requests"] for row in over_time) == point["client_cached_requests"]


def test_series_per_url_counter_restart_and_gauge() -> None:
    def page(hits: float, usage: float) -> str:
        return (
            "# TYPE vllm:prefix_cache_hits_total counter\n"  # as vLLM writes it
            f'vllm:prefix_cache_hits_total{{engine="0"}} {hits}\n'
            "# TYPE vllm:kv_cache_usage_perc gauge\n"
            f'vllm:kv_cache_usage_perc{{engine="0"}} {usage}\n'
        )

    a, b = "http://w0:8000/metrics", "http://w1:8000/metrics"
    scrapes = [
        ScrapeText(a, 0, page(100, 0.1)),
        ScrapeText(a, 2_000 * MS, page(160, 0.5)),
        ScrapeText(a, 4_000 * MS, page(20, 0.3)),  # restarted: counts from 0
        ScrapeText(b, 0, page(5, 0.0)),
        ScrapeText(b, 4_000 * MS, page(9, 0.2)),
    ]
    found = {(s.url, s.name): s for s in build_series(scrapes)}
    hits_a = found[(a, "vllm:prefix_cache_hits")]
    assert hits_a.labels == (("engine", "0"),)
    assert [(p.total, p.rate) for p in slices(hits_a)] == [(60.0, 30.0), (20.0, 10.0)]
    assert series_stats(hits_a).total == 80.0 and series_stats(hits_a).rate == 20.0
    assert series_stats(found[(b, "vllm:prefix_cache_hits")]).total == 4.0
    usage = series_stats(found[(a, "vllm:kv_cache_usage_perc")])
    assert (usage.min, usage.max) == (0.1, 0.5) and usage.avg == pytest.approx(0.3)


def test_failed_and_cancelled_requests_carry_an_error_category() -> None:
    run = ArtifactRun(
        run_id="r",
        model="m",
        dataset=None,
        dataset_format="auto",
        urls=(),
        series_interval_s=1.0,
        offset_ns=10**18,
    )
    failed = make_record(
        0,
        offsets_ns=(),
        tokens=(),
        error=ErrorKind.HTTP,
        status=400,
        error_detail="context length exceeded",
    )
    cancelled = make_record(1, error=ErrorKind.CANCELLED)
    done: RequestRecord = make_record(2)
    rows = [
        orjson.loads(line) for line in record_lines([failed, cancelled, done], "profiling", run)
    ]
    assert rows[0]["error"] == {"code": 400, "type": "http", "message": "context length exceeded"}
    assert rows[0]["metrics"] == {"error_isl": {"value": 100, "unit": "tokens"}}
    assert rows[1]["error"]["type"] == "cancelled" and rows[1]["metadata"]["was_cancelled"]
    assert rows[2]["error"] is None
    assert rows[2]["metrics"]["inter_token_latency"] == {"value": 10.0, "unit": "ms"}
    assert rows[2]["metadata"]["request_start_ns"] == done.start_ns + 10**18
