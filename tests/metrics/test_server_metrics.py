"""server_metrics: parse a real vLLM /metrics capture and take deltas between two scrapes."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from loadgen.metrics.server import (
    SPEC_ACCEPTED_PER_POS,
    MetricsParseError,
    ServerSnapshot,
    merge_snapshots,
    parse_metrics,
    server_latency_means,
    speculative_decoding_enabled,
)


def raw_sum(text: str, sample: str, **labels: str) -> float:
    """Independent reference: sum the values of matching exposition lines with a regex."""
    total = 0.0
    pattern = re.compile(rf"^{re.escape(sample)}(\{{[^}}]*\}})? (\S+)$")
    for line in text.splitlines():
        match = pattern.match(line)
        if match and all(f'{k}="{v}"' in (match.group(1) or "") for k, v in labels.items()):
            total += float(match.group(2))
    return total


@pytest.fixture(scope="module")
def metrics_text(vllm_fixtures: Path) -> str:
    return (vllm_fixtures / "metrics.txt").read_text()


def test_real_capture_spec_decode_counters(metrics_text: str) -> None:
    snapshot = parse_metrics(metrics_text)
    for name in (
        "vllm:spec_decode_num_drafts_total",
        "vllm:spec_decode_num_draft_tokens_total",
        "vllm:spec_decode_num_accepted_tokens_total",
    ):
        assert snapshot.get(name) == raw_sum(metrics_text, name)
    positions = snapshot.accepted_per_position
    assert sorted(positions) == [0, 1, 2]
    for position, value in positions.items():
        assert value == raw_sum(metrics_text, SPEC_ACCEPTED_PER_POS, position=str(position))
    assert speculative_decoding_enabled(snapshot)


def test_real_capture_histogram_totals_kept_buckets_and_created_dropped(metrics_text: str) -> None:
    snapshot = parse_metrics(metrics_text)
    for base in (
        "vllm:time_to_first_token_seconds",
        "vllm:e2e_request_latency_seconds",
        "vllm:inter_token_latency_seconds",
        "vllm:request_queue_time_seconds",
    ):
        assert snapshot.get(base + "_sum") == pytest.approx(raw_sum(metrics_text, base + "_sum"))
        assert snapshot.get(base + "_count") == raw_sum(metrics_text, base + "_count")
        assert snapshot.get(base + "_bucket") is None
        assert snapshot.get(base + "_created") is None


def test_latency_means_from_deltas_against_empty_start(metrics_text: str) -> None:
    after = parse_metrics(metrics_text)
    means = server_latency_means(ServerSnapshot(samples=dict.fromkeys(after.samples, 0.0)), after)
    ttft = "vllm:time_to_first_token_seconds"
    expected = 1000 * raw_sum(metrics_text, ttft + "_sum") / raw_sum(metrics_text, ttft + "_count")
    assert means["server_mean_ttft_ms"] == pytest.approx(expected)
    assert means["server_requests"] == raw_sum(metrics_text, ttft + "_count")
    assert means["server_mean_itl_ms"] is not None and means["server_mean_itl_ms"] > 0


def test_sums_over_engines_and_takes_point_deltas() -> None:
    def scrape(drafts_a: float, drafts_b: float, ttft_sum: float, ttft_count: float) -> str:
        return "\n".join(
            [
                "# TYPE vllm:spec_decode_num_drafts_total counter",
                f'vllm:spec_decode_num_drafts_total{{engine="0"}} {drafts_a}',
                f'vllm:spec_decode_num_drafts_total{{engine="1"}} {drafts_b}',
                "# TYPE vllm:time_to_first_token_seconds histogram",
                f'vllm:time_to_first_token_seconds_bucket{{engine="0",le="+Inf"}} {ttft_count}',
                f'vllm:time_to_first_token_seconds_sum{{engine="0"}} {ttft_sum}',
                f'vllm:time_to_first_token_seconds_count{{engine="0"}} {ttft_count}',
                "",
            ]
        )

    before = parse_metrics(scrape(10, 5, 1.0, 4))
    after = parse_metrics(scrape(30, 15, 1.5, 14))
    assert before.get("vllm:spec_decode_num_drafts_total") == 15
    assert after.get("vllm:spec_decode_num_drafts_total") == 45
    means = server_latency_means(before, after)
    assert means["server_mean_ttft_ms"] == pytest.approx(1000 * 0.5 / 10)
    assert means["server_requests"] == 10
    assert means["server_mean_e2el_ms"] is None  # not exported by this server


def test_counter_reset_gives_unknown_not_negative() -> None:
    before = ServerSnapshot(
        samples={
            "vllm:e2e_request_latency_seconds_sum": 9.0,
            "vllm:e2e_request_latency_seconds_count": 9.0,
        }
    )
    after = ServerSnapshot(
        samples={
            "vllm:e2e_request_latency_seconds_sum": 1.0,
            "vllm:e2e_request_latency_seconds_count": 2.0,
        }
    )
    assert server_latency_means(before, after)["server_mean_e2el_ms"] is None


def test_no_spec_decode_counters_means_disabled() -> None:
    text = "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running 0.0\n"
    snapshot = parse_metrics(text)
    assert not speculative_decoding_enabled(snapshot)
    assert snapshot.accepted_per_position == {}


def test_not_prometheus_text_is_one_clear_error() -> None:
    with pytest.raises(MetricsParseError, match="not Prometheus text format"):
        parse_metrics("<html>\n<body>404 not found</body>\n")


def test_the_engines_are_those_with_a_step_series(metrics_text: str) -> None:
    """vLLM's frontend labels each data-parallel engine's step histogram engine="<i>";
    loadgen's step reconstruction takes that count as the one to find."""
    assert parse_metrics(metrics_text).engines == 1  # vLLM 0.32 CPU, one engine

    def dp(engines: int, model: str = "m") -> str:
        lines = ["# TYPE vllm:iteration_tokens_total histogram"]
        for i in range(engines):
            labels = f'engine="{i}",model_name="{model}"'
            lines += [
                f'vllm:iteration_tokens_total_bucket{{{labels},le="+Inf"}} 3',
                f"vllm:iteration_tokens_total_count{{{labels}}} 3",
                f"vllm:iteration_tokens_total_sum{{{labels}}} 9",
            ]
        return "\n".join([*lines, ""])

    four = parse_metrics(dp(4))
    assert four.engines == 4 and four.get("vllm:iteration_tokens_total_count") == 12
    # two servers behind a router: their engines step on their own
    assert merge_snapshots([four, parse_metrics(dp(2, "n"))]) == ServerSnapshot(
        samples={"vllm:iteration_tokens_total_count": 18, "vllm:iteration_tokens_total_sum": 54},
        engines=6,
    )
    # a server without the series does not say: unknown, and so is any sum with it
    unlabelled = parse_metrics("# TYPE x counter\nx_total 1\n")
    assert unlabelled.engines is None
    merged = merge_snapshots([four, unlabelled])
    assert merged is not None and merged.engines is None
