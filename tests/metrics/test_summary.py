"""summarize(): hand-built records with known times against independent reference loops."""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Any

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.metrics.arrays import PointArrays
from loadgen.metrics.e2e_norm import FIELDS
from loadgen.metrics.server import ServerSnapshot
from loadgen.metrics.summary import PointContext, latency_samples, percentile_word
from loadgen.metrics.summary import summarize as summarize_struct
from loadgen.metrics.throughput import steady_window
from loadgen.metrics.trust import point_warnings
from loadgen.records import ErrorKind, RequestRecord, TokenSource
from loadgen.results.point import PointResult, file_keys, flat_fields, point_from_json
from loadgen.results.point_metrics import PointMetrics
from tests.support.fake_records import (
    MS,
    completed_records,
    failed_record,
    make_record,
    point_file,
)
from tests.support.paths import ROOT

CTX = PointContext(conc=2, input_len=100, output_len=8)


def summarize(
    records: Sequence[RequestRecord], ctx: PointContext, **scrapes: Any
) -> dict[str, Any]:
    """The metrics in the point file's spelling, as every assertion here names them."""
    return flat_fields(summarize_struct(records, ctx, **scrapes))


def linear_percentile(values: Sequence[float], p: float) -> float:
    """Textbook linear interpolation between order statistics (numpy's default method)."""
    ordered = sorted(values)
    h = (len(ordered) - 1) * p / 100
    lo = math.floor(h)
    hi = min(lo + 1, len(ordered) - 1)
    return ordered[lo] + (h - lo) * (ordered[hi] - ordered[lo])


def reference(records: Sequence[RequestRecord]) -> dict[str, list[float]]:
    """Per-metric raw samples (ms) by plain loops over the completed records."""
    out: dict[str, list[float]] = {k: [] for k in ("ttft", "e2el", "itl", "itl_per_token", "tpot")}
    for r in records:
        if r.error is not None or not r.chunk_ns:
            continue
        ttft = (r.chunk_ns[0] - r.start_ns) / MS
        e2el = (r.chunk_ns[-1] - r.start_ns) / MS
        out["ttft"].append(ttft)
        out["e2el"].append(e2el)
        for i in range(1, len(r.chunk_ns)):
            gap = (r.chunk_ns[i] - r.chunk_ns[i - 1]) / MS
            out["itl"].append(gap)
            out["itl_per_token"] += [gap / r.chunk_tokens[i]] * r.chunk_tokens[i]
        if r.output_tokens > 1:
            out["tpot"].append((e2el - ttft) / (r.output_tokens - 1))
    return out


def two_ok_one_failed() -> list[RequestRecord]:
    return [
        # 6 tokens: TTFT 50 ms, gaps 20 ms (2 tokens) and 40 ms (3 tokens).
        make_record(0, start_ns=0, offsets_ns=(50 * MS, 70 * MS, 110 * MS), tokens=(1, 2, 3)),
        # 4 tokens: TTFT 30 ms, gaps 10, 10, 10 ms of 1 token each; sent 5 ms later.
        make_record(
            1, start_ns=5 * MS, offsets_ns=(30 * MS, 40 * MS, 50 * MS, 60 * MS), tokens=(1, 1, 1, 1)
        ),
        failed_record(2, ErrorKind.HTTP, start_ns=7 * MS, end_ns=300 * MS),
    ]


def test_hand_built_point_latencies_match_reference() -> None:
    records = two_ok_one_failed()
    ctx = PointContext(conc=2, input_len=100, output_len=8, percentiles=(50, 95))
    result = summarize(records, ctx)
    ref = reference(records)
    assert ref["ttft"] == [50.0, 30.0] and ref["itl"] == [20.0, 40.0, 10.0, 10.0, 10.0]
    for name in ("ttft", "tpot", "itl", "e2el", "itl_per_token"):
        values = ref[name]
        assert result[f"mean_{name}_ms"] == pytest.approx(sum(values) / len(values))
        assert result[f"median_{name}_ms"] == pytest.approx(linear_percentile(values, 50))
        mean = sum(values) / len(values)
        std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
        assert result[f"std_{name}_ms"] == pytest.approx(std)
        for p in (50, 90, 95, 99, 99.9):
            key = f"p{percentile_word(p)}_{name}_ms"
            assert result[key] == pytest.approx(linear_percentile(values, p)), key
    # Per-token ITL: 20/2 twice, 40/3 three times, then 10 three times.
    assert result["mean_itl_per_token_ms"] == pytest.approx((20 + 40 + 30) / (2 + 3 + 3))
    # TPOT per request: (110-50)/5 = 12 ms and (60-30)/3 = 10 ms; interactivity = 1/TPOT.
    assert result["mean_tpot_ms"] == pytest.approx(11.0)
    assert result["mean_interactivity_tok_s_user"] == pytest.approx((1000 / 12 + 1000 / 10) / 2)


def test_hand_built_point_counts_and_throughput() -> None:
    records = two_ok_one_failed()
    result = summarize(records, CTX)
    assert (result["num_prompts"], result["completed"], result["failed"]) == (3, 2, 1)
    assert result["max_concurrency"] == 2
    # Duration: first send (0) to the last end of any request (the failed one, 300 ms).
    assert result["duration"] == pytest.approx(0.300)
    assert result["total_input_tokens"] == 200  # completed requests only, as vLLM
    assert result["total_output_tokens"] == 10
    assert result["request_throughput"] == pytest.approx(2 / 0.3)
    assert result["output_throughput"] == pytest.approx(10 / 0.3)
    assert result["total_token_throughput"] == pytest.approx(210 / 0.3)
    assert result["output_throughput_per_gpu"] is None
    assert result["errors_by_kind"]["http"] == 1 and sum(result["errors_by_kind"].values()) == 1
    assert result["error_rate"] == pytest.approx(1 / 3)
    assert result["input_lens"] == [100, 100, 100]
    assert result["output_lens"] == [6, 4, 0]
    assert result["ttfts"] == pytest.approx([0.05, 0.03, None])
    assert result["errors"][:2] == ["", ""] and result["errors"][2].startswith("http")
    assert result["mean_queue_time_ms"] == pytest.approx(1.0)
    assert result["token_count_source"] == "token_ids" and result["approximate"] is False


def test_per_gpu_and_percentile_names() -> None:
    ctx = PointContext(
        conc=2, input_len=100, output_len=8, percentiles=(50, 99.9, 99.99), num_gpus=4
    )
    result = summarize(two_ok_one_failed(), ctx)
    assert result["output_throughput_per_gpu"] == pytest.approx(result["output_throughput"] / 4)
    assert result["total_token_throughput_per_gpu"] == pytest.approx(
        result["total_token_throughput"] / 4
    )
    for key in ("p50_ttft_ms", "p90_itl_ms", "p99_tpot_ms", "p99.9_e2el_ms", "p99.99_ttft_ms"):
        assert key in result
    assert "p99.0_ttft_ms" not in result and "p50.0_ttft_ms" not in result


def test_records_out_of_order_give_lists_in_request_order() -> None:
    records = two_ok_one_failed()
    result = summarize(list(reversed(records)), CTX)
    assert result["output_lens"] == [6, 4, 0]


def test_all_failed() -> None:
    records = [
        failed_record(0, ErrorKind.CONNECT, start_ns=0, end_ns=5 * MS),
        failed_record(1, ErrorKind.TIMEOUT, start_ns=1 * MS, end_ns=9 * MS),
        failed_record(2, ErrorKind.TIMEOUT, start_ns=2 * MS, end_ns=8 * MS),
    ]
    result = summarize(records, CTX)
    assert (result["completed"], result["failed"]) == (0, 3)
    assert result["errors_by_kind"]["timeout"] == 2 and result["errors_by_kind"]["connect"] == 1
    assert result["error_rate"] == 1.0
    assert result["duration"] == pytest.approx(0.009)
    assert result["request_throughput"] == 0.0 and result["total_output_tokens"] == 0
    for name in ("ttft", "tpot", "itl", "e2el", "itl_per_token"):
        assert result[f"mean_{name}_ms"] is None and result[f"p99_{name}_ms"] is None
    assert result["stream_acceptance_length"] is None
    assert result["token_count_source"] is None and result["approximate"] is False


def test_no_records_at_all() -> None:
    result = summarize([], CTX)
    assert (result["num_prompts"], result["completed"], result["duration"]) == (0, 0, None)
    assert result["request_throughput"] is None and result["error_rate"] is None


def test_error_free_stream_without_tokens_counts_as_failed() -> None:
    empty = make_record(0, offsets_ns=(), tokens=(), completion_tokens=0)
    result = summarize([empty, make_record(1)], CTX)
    assert (result["completed"], result["failed"]) == (1, 1)
    assert result["errors_by_kind"]["no_tokens"] == 1
    assert result["errors"][0] == "no_tokens"


def test_one_request() -> None:
    result = summarize(
        [make_record(0, start_ns=0, offsets_ns=(7 * MS, 9 * MS), tokens=(1, 1))], CTX
    )
    assert result["mean_ttft_ms"] == result["p99.9_ttft_ms"] == pytest.approx(7.0)
    assert result["std_ttft_ms"] == 0.0
    assert result["mean_tpot_ms"] == pytest.approx(2.0)
    assert result["median_interactivity_tok_s_user"] == pytest.approx(500.0)


def test_one_token_outputs_are_left_out_of_tpot() -> None:
    records = [
        make_record(0, offsets_ns=(5 * MS,), tokens=(1,)),
        make_record(1, offsets_ns=(5 * MS, 9 * MS, 13 * MS), tokens=(1, 1, 1)),
    ]
    result = summarize(records, CTX)
    assert result["tpot_excluded_single_token"] == 1
    assert result["mean_tpot_ms"] == pytest.approx(4.0)  # only request 1
    only_single = summarize(records[:1], CTX)
    assert only_single["mean_tpot_ms"] is None
    assert only_single["median_interactivity_tok_s_user"] is None
    assert only_single["mean_itl_ms"] is None and only_single["mean_ttft_ms"] == pytest.approx(5.0)


def test_tpot_uses_usage_completion_tokens() -> None:
    # The server says 9 tokens although the chunks sum to 5: TPOT divides by 9 - 1 and the
    # mismatch is reported, not hidden.
    record = make_record(
        0, start_ns=0, offsets_ns=(10 * MS, 50 * MS), tokens=(1, 4), completion_tokens=9
    )
    result = summarize([record], CTX)
    assert result["mean_tpot_ms"] == pytest.approx(40 / 8)
    assert result["total_output_tokens"] == 9
    assert result["chunk_tokens_vs_usage_mismatches"] == 1
    assert result["chunk_tokens_vs_usage_max_abs_diff"] == 4


def test_token_count_checks() -> None:
    records = [
        make_record(0, prompt_tokens=103),  # wrong tokenizer by 3 tokens
        make_record(1, prompt_tokens=98),
        make_record(2, prompt_tokens=None, completion_tokens=None),  # no usage at all
        make_record(3, tokens=(1, 1), max_tokens=8, finish_reason="stop"),  # stopped early
        make_record(4),
    ]
    result = summarize(records, CTX)
    assert result["prompt_tokens_mismatches"] == 2
    assert result["prompt_tokens_max_abs_diff"] == 3
    assert result["prompt_tokens_unreported"] == 1
    assert result["completion_tokens_unreported"] == 1
    assert result["completion_tokens_vs_max_tokens_mismatches"] == 1
    assert result["completion_tokens_vs_max_tokens_max_abs_diff"] == 6
    assert result["chunk_tokens_vs_usage_mismatches"] == 0


def test_text_token_source_is_flagged_approximate() -> None:
    records = [make_record(0), make_record(1, token_source=TokenSource.TEXT)]
    result = summarize(records, CTX)
    assert result["approximate"] is True
    assert result["token_count_source"] == "token_ids,text"
    assert result["token_count_sources"] == {"token_ids": 1, "text": 1}


def test_chunks_read_together_are_counted_within_requests_only() -> None:
    """A 0 ns gap inside a request is two chunks from one read; the same stamp across
    two requests (their last and first chunks) is not a gap of either."""
    together = make_record(0, offsets_ns=(10 * MS, 20 * MS, 20 * MS, 30 * MS), tokens=(1, 1, 1, 1))
    apart = make_record(1, start_ns=1_000 * MS + 20 * MS, offsets_ns=(10 * MS, 20 * MS))
    # apart's first chunk lands at 1030 ms, together's last: a tie across requests
    result = summarize([together, apart], CTX)
    assert result["chunk_gaps_read_together"] == 1
    assert summarize([apart], CTX)["chunk_gaps_read_together"] == 0
    warnings = point_warnings(point_from_json(point_file({**result, "complete": True}), "test"))
    assert any("of chunk gaps are 0" in w and "25.0%" in w for w in warnings)  # 1 of 4 gaps


def test_goodput_applies_every_slo() -> None:
    records = [
        # TTFT 10, gaps 5 and 30 ms, TPOT 17.5, E2EL 45
        make_record(0, start_ns=0, offsets_ns=(10 * MS, 15 * MS, 45 * MS), tokens=(1, 1, 1)),
        # TTFT 100, gap 5, TPOT 5, E2EL 105
        make_record(1, start_ns=0, offsets_ns=(100 * MS, 105 * MS), tokens=(1, 1)),
        # single token: TPOT and ITL undefined, so only TTFT/E2EL can fail it
        make_record(2, start_ns=0, offsets_ns=(20 * MS,), tokens=(1,)),
    ]

    def good(slos: dict[str, float]) -> int:
        ctx = PointContext(conc=3, input_len=100, output_len=3, slos=slos)
        result = summarize(records, ctx)
        assert result["request_goodput"] == pytest.approx(
            result["good_requests"] / result["duration"]
        )
        return int(result["good_requests"])

    assert good({"ttft": 50}) == 2
    assert good({"tpot": 10}) == 2
    assert good({"itl": 20}) == 2  # request 0 has a 30 ms gap
    assert good({"e2el": 100}) == 2
    assert good({"ttft": 50, "tpot": 10}) == 1
    assert summarize(records, CTX)["request_goodput"] is None


def test_steady_window_throughput() -> None:
    # Closed loop, conc 2. Slot A: r0 [0, 100 ms], r2 [100.001, 200]; slot B: r1 [10, 150],
    # r3 [150.001, 260]. Both slots are busy from 10 ms (r1 starts) to 200 ms (r2 ends and
    # nothing is left to send): the hand-off dips at 100 and 150 ms stay inside.
    def closed(i: int, start_ms: float, end_ms: float) -> RequestRecord:
        start = int(start_ms * MS)
        span = int(end_ms * MS) - start
        offsets = [span * (j + 1) // 5 for j in range(5)]
        return make_record(
            i, start_ns=start, offsets_ns=offsets, tokens=(1, 2, 2, 2, 2), end_ns=start + span
        )

    records = [
        closed(0, 0, 100),
        closed(1, 10, 150),
        closed(2, 100.001, 200),
        closed(3, 150.001, 260),
    ]
    result = summarize(records, CTX)
    opened, closed_ns = 10 * MS, 200 * MS
    assert result["steady_window_start_s"] == pytest.approx(0.010)
    assert result["steady_window_duration"] == pytest.approx(0.190)
    tokens = sum(
        t
        for r in records
        for ns, t in zip(r.chunk_ns, r.chunk_tokens, strict=True)
        if opened <= ns < closed_ns
    )
    ends = sum(1 for r in records if opened <= r.end_ns < closed_ns)
    assert result["steady_output_throughput"] == pytest.approx(tokens / 0.190)
    assert result["steady_request_throughput"] == pytest.approx(ends / 0.190)
    assert result["max_concurrent_requests"] == 2
    # Never two requests in flight at once: no steady window.
    serial = summarize([closed(0, 0, 100), closed(1, 100.001, 200)], CTX)
    assert serial["steady_window_duration"] is None and serial["steady_output_throughput"] is None


def test_server_snapshots_add_cross_check_and_fill_k() -> None:
    def snap(drafts: float, accepted: float, ttft_sum: float, count: float) -> ServerSnapshot:
        return ServerSnapshot(
            samples={
                "vllm:spec_decode_num_drafts_total": drafts,
                "vllm:spec_decode_num_draft_tokens_total": 2 * drafts,
                "vllm:spec_decode_num_accepted_tokens_total": accepted,
                "vllm:time_to_first_token_seconds_sum": ttft_sum,
                "vllm:time_to_first_token_seconds_count": count,
            }
        )

    records = [
        make_record(
            0,
            offsets_ns=(MS, 2 * MS, 3 * MS),
            tokens=(1, 3, 2),
            max_tokens=50,
            finish_reason="stop",
        )
    ]
    result = summarize(
        records, CTX, server_before=snap(0, 0, 0, 0), server_after=snap(2, 3, 0.0008, 1)
    )
    assert result["spec_tokens"] == 2  # K from the server (draft tokens per draft)
    assert result["server_acceptance_length"] == pytest.approx(2.5)
    assert result["stream_acceptance_length"] == pytest.approx(2.5)
    assert result["acceptance_length_diff"] == pytest.approx(0.0)
    # within the client's TTFT of 1 ms: a server's TTFT lies inside it
    assert result["server_mean_ttft_ms"] == pytest.approx(0.8)
    assert result["server_latency_invalid_reason"] is None
    without = summarize(records, CTX)
    assert (
        without["server_acceptance_length"] is None and without["stream_acceptance_length"] is None
    )


def test_bad_context_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown SLO metric"):
        PointContext(conc=1, input_len=1, output_len=1, slos={"latency": 1.0})
    with pytest.raises(ValueError, match="percentiles"):
        PointContext(conc=1, input_len=1, output_len=1, percentiles=(100.5,))


@settings(max_examples=100, deadline=None)
@given(completed_records())
def test_invariants_of_raw_samples(records: list[RequestRecord]) -> None:
    arrays = PointArrays.build(records)
    samples = latency_samples(arrays)
    # E2EL - TTFT == sum of that request's chunk gaps, summed over requests.
    assert float(samples["itl"].sum()) == pytest.approx(
        float((samples["e2el"] - samples["ttft"]).sum())
    )
    # One per-token ITL sample per token after each request's first chunk.
    assert samples["itl_per_token"].size == sum(
        r.output_tokens - r.chunk_tokens[0] for r in records
    )
    assert float(samples["itl_per_token"].sum()) == pytest.approx(float(samples["itl"].sum()))
    ref = reference(records)
    for name in ref:
        assert np.allclose(np.sort(samples[name]), sorted(ref[name]))


@settings(max_examples=60, deadline=None)
@given(completed_records(), st.lists(st.floats(0.1, 99.9), max_size=3))
def test_percentiles_match_numpy(records: list[RequestRecord], extra: list[float]) -> None:
    ctx = PointContext(conc=2, input_len=100, output_len=8, percentiles=tuple(extra))
    result = summarize(records, ctx)
    ref = reference(records)
    for name in ("ttft", "e2el", "itl"):
        values = ref[name]
        for p in ctx.all_percentiles:
            got = result[f"p{percentile_word(p)}_{name}_ms"]
            if not values:
                assert got is None
                continue
            assert got == pytest.approx(float(np.percentile(values, p)))
            assert got == pytest.approx(linear_percentile(values, p))


def test_partial_stream_of_a_failed_request_never_enters_latency_stats() -> None:
    ok = two_ok_one_failed()[:2]
    cut = make_record(
        9,
        start_ns=0,
        offsets_ns=(900 * MS, 990 * MS),
        tokens=(1, 5),
        error=ErrorKind.DISCONNECT,
        completion_tokens=None,
    )
    with_cut, without = summarize([*ok, cut], CTX), summarize(ok, CTX)
    for key in (
        "mean_ttft_ms",
        "p99_itl_ms",
        "mean_tpot_ms",
        "mean_itl_per_token_ms",
        "p99.9_e2el_ms",
    ):
        assert with_cut[key] == without[key], key
    assert with_cut["total_output_tokens"] == without["total_output_tokens"]
    assert with_cut["errors_by_kind"]["disconnect"] == 1 and with_cut["output_lens"][-1] == 0


def test_connect_time_over_requests_that_opened_a_connection() -> None:
    records = [make_record(0, connect_ns=4 * MS), make_record(1, connect_ns=2 * MS), make_record(2)]
    result = summarize(records, CTX)
    assert result["new_connections"] == 2
    assert result["mean_connect_time_ms"] == pytest.approx(3.0)
    assert result["max_connect_time_ms"] == pytest.approx(4.0)
    warm = summarize([make_record(0)], CTX)
    assert warm["new_connections"] == 0 and warm["mean_connect_time_ms"] is None


def documented_fields() -> set[str]:
    doc = (ROOT / "docs" / "results.md").read_text()
    documented: set[str] = set()
    for line in doc.splitlines():
        if line.startswith("| `"):
            for name in re.findall(r"`([^`]+)`", line.split("|")[1]):
                # p50 is one of --percentiles' defaults, not always there (an extra)
                stats = ["mean", "median", "std", "p90", "p99", "p99.9"]
                documented |= (
                    {name.replace("<stat>", s) for s in stats} if "<stat>" in name else {name}
                )
    return documented


def schema_keys(schema: Any) -> set[str]:
    return set(file_keys(schema))


def test_every_schema_field_is_documented_and_every_documented_field_is_in_the_schema() -> None:
    documented = documented_fields()
    fields = schema_keys(PointResult)
    assert fields == documented, (fields - documented, documented - fields)


def test_summarize_produces_exactly_the_schema_metrics() -> None:
    ctx = PointContext(conc=2, input_len=100, output_len=8, percentiles=(50,), slos={"ttft": 1.0})
    produced = {
        k
        for k in summarize(two_ok_one_failed(), ctx)
        if not k.startswith("p50_") or k in schema_keys(PointMetrics)
    }
    assert produced == schema_keys(PointMetrics), produced ^ schema_keys(PointMetrics)


def test_extra_percentiles_add_keys_of_the_documented_pattern_only() -> None:
    ctx = PointContext(conc=2, input_len=100, output_len=8, percentiles=(50, 75))
    extra = set(summarize(two_ok_one_failed(), ctx)) - schema_keys(PointMetrics)
    extra -= {key for key in extra if key.startswith("p50_")}
    assert extra and all(key.startswith("p75_") for key in extra), extra
    # E2E normalized interactivity has InferenceX's fixed percentiles, not --percentiles'
    assert {key.removeprefix("p75_") for key in extra} == {
        key.removeprefix("p99_")
        for key in schema_keys(PointMetrics)
        if key.startswith("p99_") and key not in FIELDS
    }


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 20), st.integers(1, 10)), min_size=1, max_size=12),
    st.integers(1, 5),
)
def test_steady_window_matches_brute_force(spans: list[tuple[int, int]], conc: int) -> None:
    starts = np.array([s for s, _ in spans], dtype=np.int64)
    ends = np.array([s + d for s, d in spans], dtype=np.int64)

    def in_flight(t: int) -> int:  # requests with start <= t < end
        return sum(1 for s, e in zip(starts, ends, strict=True) if s <= t < e)

    times = sorted(set(starts.tolist()) | set(ends.tolist()))
    busy = [t for t in times if in_flight(t) >= conc]
    expected = None
    if busy:
        closed = min(t for t in times if t > busy[-1] and in_flight(t) < conc)
        expected = (busy[0], closed)
    assert steady_window(starts, ends, conc) == expected


def test_cancelled_requests_are_no_failures() -> None:
    """A cancelled point read error_rate 0.195: InferenceX's >5% gate would call the
    server broken. Cancelled is its own count, outside failed and the rate."""
    records = [
        *two_ok_one_failed(),
        failed_record(3, ErrorKind.CANCELLED, start_ns=8 * MS, end_ns=90 * MS),
        failed_record(4, ErrorKind.CANCELLED, start_ns=9 * MS, end_ns=90 * MS),
    ]
    result = summarize(records, CTX)
    assert result["cancelled"] == 2 and result["failed"] == 1 and result["completed"] == 2
    assert result["completed"] + result["failed"] + result["cancelled"] == result["num_prompts"]
    assert result["error_rate"] == pytest.approx(1 / 3)
    assert "cancelled" not in result["errors_by_kind"]
    only_cancelled = summarize([failed_record(0, ErrorKind.CANCELLED)], CTX)
    assert only_cancelled["error_rate"] is None and only_cancelled["failed"] == 0
