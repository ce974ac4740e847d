"""metrics/ttft_parts.py's arithmetic on parsed /metrics text: what each part is, and
which parts are null (with the reason) when a role or a series is missing. The real
simulator's parts against its trace: tests/metrics/test_ttft_parts_sim.py."""

from __future__ import annotations

import pytest

from loadgen.metrics.server import ServerSnapshot, parse_metrics
from loadgen.metrics.ttft_parts import BOUND_MS, bucket_median, ttft_parts


def histogram(name: str, total: float, count: float, labels: str = "") -> str:
    inner = f"{{{labels}}}" if labels else ""
    return f"# TYPE {name} histogram\n{name}_sum{inner} {total}\n{name}_count{inner} {count}\n"


def frontend(pre: float, route: float, count: float) -> ServerSnapshot:
    name = "dynamo_frontend_stage_duration_seconds"
    text = (
        f"# TYPE {name} histogram\n"
        f'{name}_sum{{stage="preprocess"}} {pre}\n{name}_count{{stage="preprocess"}} {count}\n'
        f'{name}_sum{{stage="route"}} {route}\n{name}_count{{stage="route"}} {count}\n'
    )
    return parse_metrics(text)


def prefill(queue: float, compute: float, count: float) -> ServerSnapshot:
    return parse_metrics(
        histogram("vllm:request_queue_time_seconds", queue, count)
        + histogram("vllm:request_prefill_time_seconds", compute, count)
    )


def decode(ttft: float, kv: float, count: float, kv_count: float | None = None) -> ServerSnapshot:
    return parse_metrics(
        histogram("vllm:time_to_first_token_seconds", ttft, count)
        + histogram("vllm:nixl_xfer_time_seconds", kv, count if kv_count is None else kv_count)
    )


BEFORE = {
    "frontend": frontend(1.0, 0.1, 10),
    "prefill": prefill(2.0, 3.0, 10),
    "decode": decode(5.0, 4.0, 10),
}


def test_each_part_is_its_histograms_mean_over_the_point() -> None:
    after = {
        # 4 requests: preprocess 2 ms + route 0.5 ms each
        "frontend": frontend(1.008, 0.102, 14),
        "prefill": prefill(2.04, 3.2, 14),  # queue 10 ms, prefill 50 ms
        "decode": decode(5.14, 4.12, 14),  # decode TTFT 35 ms, of it KV 30 ms
    }
    parts = ttft_parts(BEFORE, after, client_mean_ttft_ms=100.0)
    assert parts["frontend_ms"]["mean_ms"] == pytest.approx(2.5)
    assert parts["prefill_queue_ms"]["mean_ms"] == pytest.approx(10.0)
    assert parts["prefill_ms"]["mean_ms"] == pytest.approx(50.0)
    assert parts["kv_transfer_ms"]["mean_ms"] == pytest.approx(30.0)
    assert parts["decode_first_ms"]["mean_ms"] == pytest.approx(5.0)
    assert parts["parts_sum_ms"] == pytest.approx(97.5)
    assert parts["unexplained_ms"]["mean_ms"] == pytest.approx(2.5)
    assert parts["bound_ms"] == pytest.approx(max(BOUND_MS, 10.0))
    assert parts["adds_up"] is True
    # far more TTFT than the servers timed: said, not hidden
    short = ttft_parts(BEFORE, after, client_mean_ttft_ms=200.0)
    assert short["adds_up"] is False
    assert "do NOT add up" in short["verdict"]


def test_a_missing_role_or_series_is_null_with_its_reason() -> None:
    after = {"frontend": frontend(1.008, 0.102, 14), "prefill": prefill(2.04, 3.2, 14)}
    before = {role: BEFORE[role] for role in after}
    parts = ttft_parts(before, after, client_mean_ttft_ms=100.0)
    assert parts["prefill_ms"]["mean_ms"] == pytest.approx(50.0)
    for name in ("kv_transfer_ms", "decode_first_ms", "unexplained_ms"):
        assert parts[name]["mean_ms"] is None and parts[name]["reason"], name
    assert parts["kv_transfer_ms"]["reason"] == "no --server-metrics decode=URL"
    assert parts["adds_up"] is None and parts["verdict"].startswith("not checked")
    # a scrape that failed after the point
    failed = ttft_parts(BEFORE, {**after, "decode": None}, 100.0)
    assert "not read" in failed["kv_transfer_ms"]["reason"]
    # decode TTFT and KV transfer over different requests: no difference of their means
    odd = ttft_parts(BEFORE, {**after, "decode": decode(5.14, 4.12, 14, kv_count=13)}, 100.0)
    assert odd["decode_first_ms"]["mean_ms"] is None
    assert "different requests" in odd["decode_first_ms"]["reason"]


def test_the_median_comes_from_a_narrow_enough_bucket_only() -> None:
    start = {"0.01": 0.0, "0.025": 0.0, "0.05": 0.0, "+Inf": 0.0}
    # 10 observations, all between 25 and 50 ms: the median is read in that bucket
    end = {"0.01": 0.0, "0.025": 0.0, "0.05": 10.0, "+Inf": 10.0}
    median, why = bucket_median(start, end)
    assert median == pytest.approx(37.5) and why is None
    # in the first bucket (from 0) it could be anywhere below 10 ms
    median, why = bucket_median(start, {"0.01": 10.0, "0.025": 10.0, "0.05": 10.0, "+Inf": 10.0})
    assert median is None and why is not None and "too wide" in why
    # 10-25 ms is 2.5 times its lower bound: still read; beyond the last: not
    median, why = bucket_median(start, {"0.01": 0.0, "0.025": 10.0, "0.05": 10.0, "+Inf": 10.0})
    assert median == pytest.approx(17.5)
    median, why = bucket_median(start, {"0.01": 0.0, "0.025": 0.0, "0.05": 0.0, "+Inf": 10.0})
    assert median is None and why == "the median is above the last bucket"
