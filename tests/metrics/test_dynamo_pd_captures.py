"""The parsers on a real Dynamo 1.4.2 prefill/decode deployment's /metrics (1P1D mocker
workers behind the real frontend, tests/fixtures/dynamo_1.4.2/pd_1p1d_*): which engine
each role's text is read as, the decode worker's figures, and what `ttft_parts` can take
apart from them (each part a number or null with the reason the real series give)."""

from __future__ import annotations

import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadgen.metrics.engines import DIALECTS, engine_by_names
from loadgen.metrics.server import ServerSnapshot, parse_metrics, server_latency_means
from loadgen.metrics.ttft_parts import ttft_parts
from tests.support.paths import FIXTURES

CAPTURES = FIXTURES / "dynamo_1.4.2"
ROLES = ("frontend", "prefill", "decode")


def text(role: str) -> str:
    return (CAPTURES / f"pd_1p1d_{role}_metrics.txt").read_text()


def value(role: str, sample: str) -> float:
    """A sample summed over its label sets, read by prometheus_client's own parser."""
    families = text_string_to_metric_families(text(role))
    return sum(s.value for f in families for s in f.samples if s.name == sample)


def test_each_roles_text_is_read_as_its_engine() -> None:
    """The decode worker serves the mocker's vllm:* series; the prefill worker none of
    any engine's (only dynamo_component_* and dynamo_work_handler_*); the frontend is
    Dynamo's."""
    snapshots = {role: parse_metrics(text(role)) for role in ROLES}
    assert engine_by_names(snapshots["frontend"].samples) is DIALECTS["dynamo"]
    assert engine_by_names(snapshots["decode"].samples) is DIALECTS["vllm"]
    assert not [n for n in snapshots["prefill"].samples if n.startswith("vllm:")]
    assert value("prefill", "dynamo_component_requests_total") > 0


def zeroed(role: str) -> ServerSnapshot:
    """The role's text with every sample 0: the same series before any request (a
    snapshot without them gives no delta: metrics/server.py counter_delta)."""
    lines = [
        line if line.startswith("#") or not line else line.rsplit(" ", 1)[0] + " 0"
        for line in text(role).splitlines()
    ]
    return parse_metrics("\n".join(lines) + "\n")


def test_the_decode_workers_latency_means() -> None:
    decode = parse_metrics(text("decode"))
    means = server_latency_means(zeroed("decode"), decode)
    count = value("decode", "vllm:time_to_first_token_seconds_count")
    assert count > 0 and means["server_requests"] == count
    total = value("decode", "vllm:time_to_first_token_seconds_sum")
    assert means["server_mean_ttft_ms"] == pytest.approx(total / count * 1e3)


def test_what_ttft_parts_can_take_apart_from_the_real_series() -> None:
    """Over the captured point (from zero): no prefill queue or prefill time (the prefill
    mocker has no vllm:request_*_time_seconds), no KV transfer (no vllm:nixl_xfer_time_
    seconds on the decode one), so no decode-first part; the frontend's preprocess stage
    is timed for chat only, and these requests were completions. Every part is null with
    the series it lacks, and the sum is not checked."""
    after = {role: parse_metrics(text(role)) for role in ROLES}
    before = {role: zeroed(role) for role in ROLES}
    parts = ttft_parts(before, after, client_mean_ttft_ms=120.0)
    expected_reason = {
        "frontend_ms": "no dynamo_frontend_stage_duration_seconds{stage=preprocess}",
        "prefill_queue_ms": "no vllm:request_queue_time_seconds series",
        "prefill_ms": "no vllm:request_prefill_time_seconds series",
        "kv_transfer_ms": "no vllm:nixl_xfer_time_seconds series",
        "decode_first_ms": "the KV transfer is unknown: no vllm:nixl_xfer_time_seconds series",
    }
    for name, reason in expected_reason.items():
        assert parts[name]["mean_ms"] is None and parts[name]["reason"] == reason, name
    assert parts["adds_up"] is None and parts["parts_sum_ms"] is None
