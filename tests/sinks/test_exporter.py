"""loadgen's Prometheus exposition: what it says, that promtool accepts it, and that its
counters agree with the result files of the same run against the real simulator."""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
from collections.abc import Iterable
from pathlib import Path
from typing import Any

import aiohttp
import msgspec
import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from prometheus_client.samples import Sample

from loadgen.histogram import BulkHistogram
from loadgen.metrics.summary import PointContext
from loadgen.records import ErrorKind, RequestRecord, TokenSource
from loadgen.run.sweep import SweepOptions
from loadgen.sinks.prometheus import (
    ITL_BUCKETS,
    LoadgenMetrics,
    MetricsObserver,
    live_metrics,
    serve_metrics,
)
from tests.support.fake_records import full_point

MS = 1_000_000


def make_record(
    request_id: int,
    conc: int,
    gaps_ms: list[float],
    tokens: list[int],
    *,
    finish: str = "length",
    error: ErrorKind | None = None,
) -> RequestRecord:
    start = 10 * MS
    chunk_ns = tuple(start + int(sum(gaps_ms[: i + 1]) * MS) for i in range(len(gaps_ms)))
    return RequestRecord(
        request_id=request_id,
        conc=conc,
        input_len=100,
        max_tokens=sum(tokens) + (0 if finish == "length" else 8),
        scheduled_ns=start - 2 * MS,
        start_ns=start,
        connect_ns=0,
        chunk_ns=chunk_ns,
        chunk_tokens=tuple(tokens),
        end_ns=(chunk_ns[-1] if chunk_ns else start) + 1,
        token_source=TokenSource.TOKEN_IDS,
        prompt_tokens=None if error else 100,
        completion_tokens=None if error else sum(tokens),
        finish_reason=finish,
        status=200,
        error=error,
    )


def point_result(**fields: Any) -> Any:
    """A real summary of one record, with the server-side fields a test sets."""
    record = make_record(0, 1, [1.0, 1.0], [1, 1])
    result = full_point([record], PointContext(conc=1, input_len=100, output_len=2))
    return msgspec.structs.replace(
        result, metrics=msgspec.structs.replace(result.metrics, **fields)
    )


def samples(registry: CollectorRegistry) -> list[Sample]:
    text = generate_latest(registry).decode()
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def value(found: Iterable[Sample], name: str, **labels: str) -> float:
    matching = [
        s.value
        for s in found
        if s.name == name and all(s.labels.get(k) == v for k, v in labels.items())
    ]
    assert len(matching) == 1, f"{name}{labels}: {len(matching)} samples"
    return matching[0]


def test_exposition_carries_what_the_records_measured() -> None:
    registry = CollectorRegistry()
    observer = MetricsObserver(LoadgenMetrics(registry), model="m", endpoint="chat", points=2)
    observer.point_started(4, 3)
    ok_a = make_record(0, 4, [5.0, 2.0, 4.0, 1.0], [1, 2, 4, 1])  # last chunk cut by length
    ok_b = make_record(1, 4, [7.0, 3.0, 3.0], [1, 1, 3], finish="stop")
    failed = make_record(2, 4, [], [], error=ErrorKind.TIMEOUT)
    for record in (ok_a, ok_b, failed):
        observer.request_started(4)
        observer.request_finished(record)
    observer.point_finished(
        4,
        point_result(server_acceptance_length=2.25, server_acceptance_per_position=[0.7, 0.3, 0.1]),
    )
    got = samples(registry)
    point = {"model_name": "m", "endpoint": "chat", "conc": "4"}

    assert value(got, "loadgen_requests_total", outcome="ok", **point) == 2
    assert value(got, "loadgen_requests_total", outcome="error", **point) == 1
    assert value(got, "loadgen_request_errors_total", kind="timeout", **point) == 1
    assert value(got, "loadgen_request_errors_total", kind="http", **point) == 0
    assert value(got, "loadgen_output_tokens_total", **point) == 8 + 5
    assert value(got, "loadgen_prompt_tokens_total", **point) == 200
    # decode chunks: a's 2nd-3rd (its 4th was cut by max_tokens), b's 2nd-3rd.
    assert value(got, "loadgen_decode_chunks_total", **point) == 4
    assert value(got, "loadgen_decode_tokens_total", **point) == 2 + 4 + 1 + 3
    assert (
        value(got, "loadgen_decode_accepted_tokens_per_position_total", position="0", **point) == 3
    )
    assert (
        value(got, "loadgen_decode_accepted_tokens_per_position_total", position="1", **point) == 2
    )
    assert (
        value(got, "loadgen_decode_accepted_tokens_per_position_total", position="2", **point) == 1
    )
    assert value(got, "loadgen_time_to_first_token_seconds_sum", **point) == pytest.approx(0.012)
    assert value(got, "loadgen_e2e_request_latency_seconds_sum", **point) == pytest.approx(0.025)
    assert value(got, "loadgen_inter_chunk_latency_seconds_count", **point) == 5
    assert value(got, "loadgen_inter_chunk_latency_seconds_sum", **point) == pytest.approx(0.013)
    # per token: one sample per token of every later chunk; the sum is still the gaps' sum.
    assert value(got, "loadgen_inter_token_latency_seconds_count", **point) == 7 + 4
    assert value(got, "loadgen_inter_token_latency_seconds_sum", **point) == pytest.approx(0.013)
    tpot = (0.007 / 7) + (0.006 / 4)
    assert value(got, "loadgen_time_per_output_token_seconds_sum", **point) == pytest.approx(tpot)
    assert value(got, "loadgen_queue_time_seconds_sum", **point) == pytest.approx(0.004)
    assert value(got, "loadgen_requests_in_flight", model_name="m", endpoint="chat") == 0
    assert value(got, "loadgen_target_concurrency", model_name="m", endpoint="chat") == 4
    assert value(got, "loadgen_sweep_progress_ratio", model_name="m", endpoint="chat") == 0.5
    assert value(got, "loadgen_server_spec_decode_acceptance_length", **point) == 2.25
    assert (
        value(got, "loadgen_server_spec_decode_acceptance_rate_per_position", position="1", **point)
        == 0.3
    )
    # 1 ms falls in le=0.001, 2 ms (inclusive bound) in le=0.0025 with 1 ms.
    assert value(got, "loadgen_inter_chunk_latency_seconds_bucket", le="0.001", **point) == 1
    assert value(got, "loadgen_inter_chunk_latency_seconds_bucket", le="0.0025", **point) == 2


def test_promtool_accepts_the_exposition() -> None:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run scripts/ensure-prometheus"
    registry = CollectorRegistry()
    observer = MetricsObserver(
        LoadgenMetrics(registry), model="m", endpoint="completions", points=1
    )
    observer.point_started(1, 1)
    observer.request_started(1)
    observer.request_finished(make_record(0, 1, [3.0, 1.0, 1.0], [1, 3, 2]))
    observer.session_started(1, True)  # a session turn: the session series too
    observer.request_started(1)
    observer.request_finished(
        dataclasses.replace(
            make_record(1, 1, [2.0, 1.0], [1, 1]),
            session_id="r.0.0:t",
            turn_index=0,
            tree_id="r.0.0:t",
            cached_tokens=64,
            theoretical_cached_tokens=64,
        )
    )
    observer.session_finished(1, True)
    observer.point_finished(1, point_result(server_acceptance_rate=0.5))
    exposition = generate_latest(registry)
    assert (
        b'loadgen_session_time_to_first_token_seconds_count{conc="1",context_bin="0-8192"'
        in exposition
    )
    checked = subprocess.run(
        [promtool, "check", "metrics"],
        input=exposition,
        capture_output=True,
        timeout=30,
        check=False,
    )
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()


def promtool_check(exposition: bytes) -> subprocess.CompletedProcess[bytes]:
    promtool = shutil.which("promtool")
    assert promtool, "promtool missing: run scripts/ensure-prometheus"
    return subprocess.run(
        [promtool, "check", "metrics"],
        input=exposition,
        capture_output=True,
        timeout=30,
        check=False,
    )


async def test_promtool_accepts_the_exposition_of_a_real_run(tmp_path: Path) -> None:
    """Every series a real sweep against `loadgen sim` in its own process sets (MTP K=2,
    so acceptance, and 12 ms steps the arrivals can be clustered into, so the step-time
    gauges), as Prometheus would scrape it, passes `promtool check metrics`: no label
    Prometheus reserves (`quantile`, `le`) on a family whose type does not own it.

    On this shared machine the simulator can lose the CPU inside a step's writes and the
    point's step figures are then null (steps_note says why): the point is measured
    again, at most three times, until its exposition carries the step gauges."""
    from loadgen.config.args import spec_from_options
    from loadgen.run.sweep import sweep_points
    from tests.support.procs import free_port, start_sim, stop

    port = free_port()
    sim = start_sim(port, tmp_path / "sim.log", "--step-fixed-ms", "12", "--spec-tokens", "2")
    notes: list[str] = []
    try:
        for attempt in range(3):
            results = tmp_path / f"results{attempt}"
            spec = spec_from_options(
                {
                    "base_url": f"http://127.0.0.1:{port}",
                    "conc": "8",
                    "isl": 64,
                    "osl": 64,
                    "prompts_per_conc": 2,
                    "warmup_per_conc": 0,
                    "encoder": "raw",
                    "spec_tokens": 2,
                    "no_progress": True,
                    "results": str(results),
                }
            )
            registry = CollectorRegistry()
            observer = MetricsObserver(
                LoadgenMetrics(registry),
                model=spec.target.model or "",
                endpoint=spec.target.endpoint,
                points=1,
                spec_tokens=2,
            )
            await sweep_points(spec, SweepOptions(observer=observer))
            steps = [s for s in samples(registry) if s.name == "loadgen_engine_step_seconds"]
            if steps:
                break
            notes.append(orjson.loads((results / "conc_8.json").read_bytes())["steps_note"])
    finally:
        stop(sim)
    assert steps, f"no engine steps, so the check would miss their gauge: {notes}"
    checked = promtool_check(generate_latest(registry))
    assert checked.returncode == 0, checked.stdout.decode() + checked.stderr.decode()
    assert {s.labels["percentile"] for s in steps} == {"50", "90", "99"}
    assert all(s.labels["kind"] in ("all", "decode", "prefill") and s.value > 0 for s in steps)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.floats(min_value=0, max_value=20, allow_nan=False), max_size=200),
    st.sampled_from(ITL_BUCKETS),
)
def test_bulk_histogram_buckets_like_prometheus_client(values: list[float], edge: float) -> None:
    values = [*values, edge]  # a value on a bound must land in that bound's bucket
    registry = CollectorRegistry()
    reference = Histogram("ref_seconds", "h", buckets=ITL_BUCKETS, registry=registry)
    bulk = BulkHistogram("bulk_seconds", "h", (), ITL_BUCKETS, registry)
    for v in values:
        reference.observe(v)
    bulk.labels().observe_many(np.asarray(values, dtype=np.float64))
    got = samples(registry)
    for bound in ITL_BUCKETS:
        le = repr(float(bound))
        ref = [
            s.value
            for s in got
            if s.name == "ref_seconds_bucket" and float(s.labels["le"]) == bound
        ]
        assert value(got, "bulk_seconds_bucket", le=le) == ref[0]
    assert value(got, "bulk_seconds_count") == len(values)
    assert value(got, "bulk_seconds_sum") == pytest.approx(value(got, "ref_seconds_sum"))


async def test_metrics_served_over_http_and_loop_lag_recorded() -> None:
    registry = CollectorRegistry()
    metrics = LoadgenMetrics(registry)
    observer = MetricsObserver(metrics, model="m", endpoint="completions", points=1)
    for lag_s in (0.0001, 0.0002, 0.003, 0.0004, 0.02):
        observer.loop_lag(lag_s)
    async with (
        serve_metrics(registry) as server,
        aiohttp.ClientSession() as session,
        session.get(server.url) as response,
    ):
        assert response.status == 200
        assert response.headers["Content-Type"].startswith("text/plain")
        text = await response.text()
    got = [s for f in text_string_to_metric_families(text) for s in f.samples]
    assert value(got, "loadgen_event_loop_lag_seconds_count") == 5
    assert value(got, "loadgen_event_loop_lag_seconds_sum") == pytest.approx(0.0237)
    assert value(got, "loadgen_build_info", version=__import__("loadgen").__version__) == 1


async def test_counters_agree_with_the_result_files_of_the_same_run(tmp_path: Path) -> None:
    """A real sweep against the simulator (MTP, K=2, injected 500s and
    mid-stream aborts) with the exporter
    as the runner's observer: every counter equals the matching field of the result file."""
    from loadgen.config.args import spec_from_options
    from loadgen.run.sweep import sweep_points
    from loadgen.sim.config import FaultConfig
    from loadgen.sim.server import SimConfig, running_simulator

    config = SimConfig(
        model="sim-model",
        spec_tokens=2,
        step_fixed_ms=1.0,
        decode_token_us=1.0,
        faults=FaultConfig(error_500=0.15, abort=0.1),
    )
    registry = CollectorRegistry()
    metrics = LoadgenMetrics(registry)
    async with running_simulator(config) as sim:
        spec = spec_from_options(
            {
                "base_url": sim.base_url,
                "conc": "2,4",
                "isl": 64,
                "osl": 24,
                "prompts_per_conc": 5,
                "warmup_per_conc": 0,
                "encoder": "raw",
                "spec_tokens": 2,
                "no_progress": True,
                "max_error_rate": 1.0,
                "results": str(tmp_path),
            }
        )
        observer = MetricsObserver(
            metrics,
            model="sim-model",
            endpoint=spec.target.endpoint,
            points=len(spec.load.conc),
            spec_tokens=spec.scoring.spec_tokens,
        )
        outcome = await sweep_points(spec, SweepOptions(observer=observer))
    got = samples(registry)
    assert value(got, "loadgen_sweep_progress_ratio") == 1.0
    assert value(got, "loadgen_requests_in_flight") == 0
    failed_total = 0
    for point in outcome.points:
        result = orjson.loads(point.path.read_bytes())
        labels = {"conc": str(point.conc)}
        completed = result["completed"]
        failed_total += result["failed"]
        assert value(got, "loadgen_requests_total", outcome="ok", **labels) == completed
        assert value(got, "loadgen_requests_total", outcome="error", **labels) == result["failed"]
        for kind, count in result["errors_by_kind"].items():
            assert value(got, "loadgen_request_errors_total", kind=kind, **labels) == count
        assert value(got, "loadgen_prompt_tokens_total", **labels) == result["total_input_tokens"]
        assert value(got, "loadgen_output_tokens_total", **labels) == result["total_output_tokens"]
        assert value(got, "loadgen_time_to_first_token_seconds_count", **labels) == completed
        assert value(got, "loadgen_time_to_first_token_seconds_sum", **labels) == pytest.approx(
            result["mean_ttft_ms"] * completed / 1000
        )
        assert value(got, "loadgen_e2e_request_latency_seconds_sum", **labels) == pytest.approx(
            result["mean_e2el_ms"] * completed / 1000
        )
        gaps = result["total_chunks"] - completed
        assert value(got, "loadgen_inter_chunk_latency_seconds_count", **labels) == gaps
        assert value(got, "loadgen_inter_chunk_latency_seconds_sum", **labels) == pytest.approx(
            result["mean_itl_ms"] * gaps / 1000
        )
        chunks = value(got, "loadgen_decode_chunks_total", **labels)
        assert chunks == result["stream_acceptance_decode_chunks"]
        assert value(got, "loadgen_decode_tokens_total", **labels) / chunks == pytest.approx(
            result["stream_acceptance_length"]
        )
        for position, rate in enumerate(result["stream_acceptance_per_position"]):
            accepted = [
                s.value
                for s in got
                if s.name == "loadgen_decode_accepted_tokens_per_position_total"
                and s.labels["conc"] == labels["conc"]
                and s.labels["position"] == str(position)
            ]
            assert sum(accepted) / chunks == pytest.approx(rate)
        assert value(
            got, "loadgen_server_spec_decode_acceptance_length", **labels
        ) == pytest.approx(result["server_acceptance_length"])
        for stat in ("mean", "50", "75", "90", "95", "99"):
            field = f"{stat if stat == 'mean' else 'p' + stat}_e2e_norm_intvty"
            assert value(got, "loadgen_e2e_norm_intvty", stat=stat, **labels) == result[field]
        assert result["acceptance_length_source"] == "stream"  # stream interval 1: valid
        assert value(got, "loadgen_acceptance_length", source="stream", **labels) == pytest.approx(
            result["stream_acceptance_length"]
        )
    assert failed_total > 0, "the fault injection should have produced some errors"
    # One loop-lag quantity: the live histogram holds exactly the samples the result
    # files summarize, and its largest sample is the files' largest.
    results = [orjson.loads(point.path.read_bytes()) for point in outcome.points]
    lag_count = value(got, "loadgen_event_loop_lag_seconds_count")
    assert lag_count == sum(r["client_loop_lag_samples"] for r in results) > 0
    largest_ms = max(r["client_loop_lag_max_ms"] for r in results)
    buckets = sorted(
        (float(s.labels["le"]), s.value)
        for s in got
        if s.name == "loadgen_event_loop_lag_seconds_bucket"
    )
    first_full = next(le for le, count in buckets if count == lag_count)
    below = [le for le, _ in buckets if le < first_full]
    assert largest_ms / 1e3 <= first_full and (not below or largest_ms / 1e3 > below[-1])


async def test_live_metrics_serves_an_observer_that_learns_k_from_the_first_point() -> None:
    async with live_metrics(model="m", endpoint="chat", points=2, spec_tokens=None, port=0) as (
        server,
        observer,
    ):
        # finish "length", last chunk of 3 tokens: cut or not depends on K.
        for conc, spec_tokens in ((1, 2), (2, None)):
            record = make_record(0, conc, [2.0, 1.0, 1.0], [1, 3, 3])
            observer.point_started(conc, 1)
            observer.request_started(conc)
            observer.request_finished(record)
            ctx = PointContext(conc=conc, input_len=100, output_len=7, spec_tokens=spec_tokens)
            observer.point_finished(conc, full_point([record], ctx))
        async with aiohttp.ClientSession() as session, session.get(server.url) as response:
            text = await response.text()
    got = [s for f in text_string_to_metric_families(text) for s in f.samples]
    # K unknown at conc 1: every length-cut final chunk is left out, as the results do.
    assert value(got, "loadgen_decode_chunks_total", conc="1") == 1
    # K = 2 learned from conc 1's result: a final chunk of K+1 tokens was not cut.
    assert value(got, "loadgen_decode_chunks_total", conc="2") == 2
    assert value(got, "loadgen_sweep_progress_ratio") == 1.0
    assert value(got, "loadgen_target_concurrency") == 2  # still inside the block
    observer.finished()
    assert value(samples(observer.metrics.registry), "loadgen_target_concurrency") == 0


def test_ttfa_and_phase_tokens_are_the_results_own() -> None:
    """A thinking run: TTFA observed per request that answered, tokens counted by phase,
    as metrics/phases.py derives them for the result file; an unseparated request adds
    to neither."""
    registry = CollectorRegistry()
    observer = MetricsObserver(
        LoadgenMetrics(registry), model="m", endpoint="chat", points=1, thinking=True
    )
    observer.point_started(2, 3)
    # reasoning in chunks 0-1 (3 tokens), the answer from chunk 2 (5 tokens), at 5+2+4 ms
    answered = dataclasses.replace(
        make_record(0, 2, [5.0, 2.0, 4.0, 1.0], [1, 2, 4, 1]), phase_marks=(0, 2)
    )
    never = dataclasses.replace(make_record(1, 2, [7.0, 3.0], [1, 1]), phase_marks=(0,))
    unseparated = make_record(2, 2, [6.0, 1.0], [1, 1])
    for record in (answered, never, unseparated):
        observer.request_started(2)
        observer.request_finished(record)
    got = samples(registry)
    point = {"model_name": "m", "endpoint": "chat", "conc": "2"}
    assert value(got, "loadgen_ttfa_seconds_count", **point) == 1
    assert value(got, "loadgen_ttfa_seconds_sum", **point) == pytest.approx(0.011)
    assert value(got, "loadgen_phase_output_tokens_total", phase="reasoning", **point) == 3 + 2
    assert value(got, "loadgen_phase_output_tokens_total", phase="answer", **point) == 5
