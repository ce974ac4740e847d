"""Time slices (metrics/slices.py) on records whose every time is known."""

from __future__ import annotations

import pytest

from loadgen.metrics.slices import time_slices
from loadgen.records import ErrorKind
from tests.support.fake_records import MS, failed_record, make_record

S = 1000 * MS  # one second in ns
T0 = 10 * S


def test_chunks_ttft_and_itl_land_in_the_slice_they_arrived_in() -> None:
    # A: sent at 0, first token at 0.5 s, more at 1.2 and 1.4 s (2 tokens each)
    a = make_record(0, start_ns=T0, offsets_ns=(S // 2, 1200 * MS, 1400 * MS), tokens=(1, 2, 2))
    # B: sent at 1.1 s, first token at 1.3 s (TTFT 200 ms), second at 2.5 s
    b = make_record(1, start_ns=T0 + 1100 * MS, offsets_ns=(200 * MS, 1400 * MS), tokens=(1, 1))
    slices = time_slices([a, b], 1.0)
    assert [s.start_s for s in slices] == [0.0, 1.0, 2.0]
    first, second, third = slices
    assert (first.output_tokens, second.output_tokens, third.output_tokens) == (1, 5, 1)
    assert first.output_throughput == pytest.approx(1.0)
    assert first.p50_ttft_ms == pytest.approx(500) and first.ttft_samples == 1
    assert second.p50_ttft_ms == pytest.approx(200) and second.ttft_samples == 1
    assert third.ttft_samples == 0 and third.p99_ttft_ms is None  # null, never 0
    # A's gaps end at 1.2 s (700 ms) and 1.4 s (200 ms): slice 1; B's at 2.5 s (1200 ms)
    assert second.itl_samples == 2 and second.p50_itl_ms == pytest.approx(450)
    assert third.p50_itl_ms == pytest.approx(1200)
    assert (first.requests_started, second.requests_started) == (1, 1)
    assert (second.requests_completed, third.requests_completed) == (1, 1)
    # the last slice ends at the last record's end (2.5 s + 0.1 ms)
    assert third.duration_s == pytest.approx(0.5001)


def test_in_flight_is_time_weighted_and_counts_failed_requests() -> None:
    # 0..2 s one request, 0.5..1.0 s a second one (failed, no tokens)
    long = make_record(0, start_ns=T0, offsets_ns=(S, 2 * S - MS // 10), tokens=(1, 1))
    short = failed_record(1, ErrorKind.HTTP, start_ns=T0 + S // 2, end_ns=T0 + S)
    first, second = time_slices([long, short], 1.0)
    assert first.in_flight_mean == pytest.approx(1.5) and first.in_flight_max == 2
    assert second.in_flight_mean == pytest.approx(1.0) and second.in_flight_max == 1
    assert first.requests_completed == 0 and second.requests_completed == 1


def test_kv_usage_is_the_mean_of_the_samples_in_the_slice() -> None:
    a = make_record(0, start_ns=T0, offsets_ns=(S // 2, 2 * S + S // 2), tokens=(1, 1))
    kv = [(T0 + 100 * MS, 0.2), (T0 + 600 * MS, 0.4), (T0 + 2100 * MS, 0.9)]
    slices = time_slices([a], 1.0, kv)
    assert slices[0].kv_cache_usage_mean == pytest.approx(0.3)
    assert slices[1].kv_cache_usage_mean is None
    assert slices[2].kv_cache_usage_mean == pytest.approx(0.9)


def test_totals_over_slices_match_the_records() -> None:
    records = [
        make_record(
            i,
            start_ns=T0 + i * 300 * MS,
            offsets_ns=tuple(k * 70 * MS for k in range(1, 12)),
            tokens=(1,) + (2,) * 10,
        )
        for i in range(20)
    ]
    slices = time_slices(records, 0.5)
    assert sum(s.output_tokens for s in slices) == 20 * 21
    assert sum(s.ttft_samples for s in slices) == 20
    assert sum(s.itl_samples for s in slices) == 20 * 10
    assert sum(s.requests_completed for s in slices) == 20
    assert time_slices([], 1.0) == []


def test_the_timeline_has_one_bar_per_request_in_send_order() -> None:
    from loadgen.metrics.timeline import request_timeline

    late = make_record(0, start_ns=T0 + S, offsets_ns=(100 * MS, 400 * MS), tokens=(1, 1))
    early = make_record(1, start_ns=T0, offsets_ns=(300 * MS, 900 * MS), tokens=(1, 1))
    failed = failed_record(2, ErrorKind.TIMEOUT, start_ns=T0 + S // 2, end_ns=T0 + 2 * S)
    bars = request_timeline([late, early, failed])
    assert [b.request_id for b in bars] == [1, 2, 0]
    first, broken, last = bars
    assert (first.start_s, first.first_token_s, first.end_s) == pytest.approx((0, 0.3, 0.9))
    assert broken.ok is False and broken.first_token_s is None
    assert (broken.start_s, broken.end_s) == pytest.approx((0.5, 2.0))
    assert (last.start_s, last.first_token_s, last.end_s) == pytest.approx((1.0, 1.1, 1.4))
    assert request_timeline([]) == []
