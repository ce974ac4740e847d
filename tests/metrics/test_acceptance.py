"""MTP acceptance from the stream (chunk token counts) and from server counter deltas."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.metrics.acceptance import (
    acceptance_difference,
    best_acceptance_length,
    itl_merged_steps,
    server_acceptance,
    stream_acceptance,
    stream_validity,
)
from loadgen.metrics.server import ServerSnapshot, parse_metrics
from loadgen.records import ErrorKind, RequestRecord
from tests.support.fake_records import MS, completed_records, failed_record, make_record


def reference_decode_chunks(records: Sequence[RequestRecord], k: int) -> list[int]:
    """The design's rule written as a plain loop, independent of the numpy implementation."""
    chunks: list[int] = []
    for record in records:
        if record.error is not None or not record.chunk_tokens:
            continue
        decode = list(record.chunk_tokens[1:])
        at_limit = record.finish_reason == "length" or sum(record.chunk_tokens) >= record.max_tokens
        if decode and at_limit and decode[-1] < k + 1:
            decode.pop()  # cut short by max_tokens
        chunks.extend(decode)
    return chunks


def records_with(
    tokens_list: Sequence[Sequence[int]], finish: str = "length"
) -> list[RequestRecord]:
    return [
        make_record(
            i, offsets_ns=[(j + 1) * MS for j in range(len(t))], tokens=t, finish_reason=finish
        )
        for i, t in enumerate(tokens_list)
    ]


def test_hand_built_k2() -> None:
    # Request 0 stops at max_tokens with a 1-token final chunk (cut short: excluded);
    # request 1's final chunk carries K+1 = 3 tokens (not cut: kept).
    records = records_with([(1, 3, 2, 3, 1), (1, 3, 3)])
    result = stream_acceptance(records, 2)
    decode = [3, 2, 3, 3, 3]
    assert result["stream_acceptance_decode_chunks"] == len(decode)
    assert result["stream_acceptance_length"] == pytest.approx(sum(decode) / len(decode))
    assert result["stream_acceptance_rate"] == pytest.approx((sum(decode) / len(decode) - 1) / 2)
    assert result["stream_acceptance_per_position"] == pytest.approx([5 / 5, 4 / 5])
    assert result["stream_acceptance_oversized_chunks"] == 0


def test_final_chunk_kept_when_request_stopped_naturally() -> None:
    records = [
        make_record(
            0,
            offsets_ns=(MS, 2 * MS, 3 * MS),
            tokens=(1, 3, 1),
            max_tokens=50,
            finish_reason="stop",
        )
    ]
    result = stream_acceptance(records, 2)
    assert result["stream_acceptance_decode_chunks"] == 2
    assert result["stream_acceptance_length"] == pytest.approx(2.0)


def test_real_vllm_stream_matches_real_server_counters(vllm_fixtures: Path) -> None:
    """The capture's draft model equals the target: every step emits K+1 = 4 tokens."""
    tokens: list[int] = []
    finish = None
    for line in (vllm_fixtures / "completions_stream_token_ids_usage.sse").read_text().splitlines():
        if not line.startswith("data: {"):
            continue
        event: dict[str, Any] = json.loads(line[len("data: ") :])
        for choice in event["choices"]:
            if choice.get("token_ids"):
                tokens.append(len(choice["token_ids"]))
            finish = choice.get("finish_reason") or finish
    record = make_record(
        0,
        offsets_ns=[(i + 1) * MS for i in range(len(tokens))],
        tokens=tokens,
        max_tokens=24,
        finish_reason=finish,
    )
    server = server_acceptance(
        ServerSnapshot(), parse_metrics((vllm_fixtures / "metrics.txt").read_text())
    )
    # The counters exist only after the capture; an absent "before" counter is unknown.
    assert server["server_acceptance_length"] is None
    after = parse_metrics((vllm_fixtures / "metrics.txt").read_text())
    before = ServerSnapshot(samples=dict.fromkeys(after.samples, 0.0))
    server = server_acceptance(before, after)
    stream = stream_acceptance([record], server["server_spec_tokens"])
    assert tokens[-1] < 4 and finish == "length"  # the final chunk was cut by max_tokens
    assert server["server_spec_tokens"] == 3
    assert server["server_acceptance_length"] == pytest.approx(4.0)
    assert server["server_acceptance_rate"] == pytest.approx(1.0)
    assert server["server_acceptance_per_position"] == pytest.approx([1.0, 1.0, 1.0])
    assert stream["stream_acceptance_length"] == pytest.approx(4.0)
    assert stream["stream_acceptance_per_position"] == pytest.approx([1.0, 1.0, 1.0])
    diff = acceptance_difference(stream, server)
    assert diff["acceptance_length_diff"] == pytest.approx(0.0)
    assert diff["acceptance_per_position_diff"] == pytest.approx([0.0, 0.0, 0.0])


def test_server_deltas_hand_built() -> None:
    def snap(
        drafts: float, draft_tokens: float, accepted: float, per_pos: list[float]
    ) -> ServerSnapshot:
        return ServerSnapshot(
            samples={
                "vllm:spec_decode_num_drafts_total": drafts,
                "vllm:spec_decode_num_draft_tokens_total": draft_tokens,
                "vllm:spec_decode_num_accepted_tokens_total": accepted,
            },
            keyed={
                "vllm:spec_decode_num_accepted_tokens_per_pos_total": {
                    str(i): v for i, v in enumerate(per_pos)
                }
            },
        )

    before = snap(10, 30, 12, [6, 4, 2])
    after = snap(110, 330, 162, [86, 54, 22])
    result = server_acceptance(before, after)
    assert result["server_acceptance_length"] == pytest.approx(1 + 150 / 100)
    assert result["server_acceptance_rate"] == pytest.approx(150 / 300)
    assert result["server_acceptance_per_position"] == pytest.approx([0.8, 0.5, 0.2])
    assert result["server_spec_tokens"] == 3
    assert result["server_spec_decode_drafts"] == 100
    # Nothing drafted during the point (idle server or spec decoding off): unknown.
    idle = server_acceptance(after, after)
    assert idle["server_acceptance_length"] is None
    assert idle["server_acceptance_per_position"] is None


def test_no_spec_decoding_gives_none_everywhere() -> None:
    records = records_with([(1, 1, 1)])
    for k in (None, 0):
        result = stream_acceptance(records, k)
        assert all(value is None for value in result.values()), result
    assert server_acceptance(ServerSnapshot(), ServerSnapshot())["server_acceptance_rate"] is None
    diff = acceptance_difference(stream_acceptance(records, None), {})
    assert set(diff.values()) == {None}


def test_failed_and_single_chunk_requests_contribute_nothing() -> None:
    records = [failed_record(0, ErrorKind.TIMEOUT), *records_with([(1,)])]
    result = stream_acceptance(records, 2)
    assert result["stream_acceptance_decode_chunks"] == 0
    assert result["stream_acceptance_length"] is None


def test_oversized_chunks_flag_coalesced_steps() -> None:
    result = stream_acceptance(records_with([(1, 3, 5, 3)], finish="stop"), 2)
    assert result["stream_acceptance_oversized_chunks"] == 1
    assert result["stream_acceptance_decode_chunks"] == 3
    # One step emits at most K+1 = 3 tokens: the 5 proves a merge, so nothing is published.
    assert result["stream_acceptance_length"] is None
    assert result["stream_acceptance_rate"] is None
    assert result["stream_acceptance_per_position"] is None
    assert result["stream_acceptance_invalid_reason"] == (
        "1 of 3 decode chunks carried more than K+1=3 tokens: the server merged engine "
        "steps (stream interval > 1 or a lagging frontend)"
    )


def test_a_single_oversized_chunk_among_many_still_voids_the_stream() -> None:
    # 999 clean steps and one lagging merge: merges within K+1 are invisible, so one
    # visible merge is enough to stop reading chunks as steps (docs/results.md).
    clean = [(1, *([2] * 999), 1)]  # the final 1 reaches max_tokens: left out as cut short
    assert stream_acceptance(records_with(clean, finish="stop"), 2)[
        "stream_acceptance_length"
    ] == pytest.approx(2.0)
    merged = [(1, *([2] * 998), 4, 1)]
    result = stream_acceptance(records_with(merged, finish="stop"), 2)
    assert result["stream_acceptance_length"] is None
    assert result["stream_acceptance_oversized_chunks"] == 1
    assert str(result["stream_acceptance_invalid_reason"]).startswith("1 of 999 ")


def test_known_stream_interval_voids_the_stream_even_within_k_plus_1() -> None:
    assert stream_validity(10, 0, 2) is None
    assert stream_validity(10, 0, 2, stream_interval=1) is None
    reason = stream_validity(10, 0, 2, stream_interval=2)
    assert reason is not None and "every 2 engine steps" in reason


def test_best_source_prefers_a_valid_stream() -> None:
    valid = stream_acceptance(records_with([(1, 3, 2, 1)], finish="stop"), 2)  # (3+2)/2
    server = {"server_acceptance_length": 2.0}
    best = best_acceptance_length(valid, server)
    assert best == {"acceptance_length": pytest.approx(2.5), "acceptance_length_source": "stream"}
    assert acceptance_difference(valid, server)["acceptance_length_diff"] == pytest.approx(0.5)
    assert itl_merged_steps(valid) is False


def test_best_source_falls_back_to_the_server_when_the_stream_is_invalid() -> None:
    invalid = stream_acceptance(records_with([(1, 3, 5, 3)], finish="stop"), 2)
    server = {
        "server_acceptance_length": 2.5,
        "server_acceptance_rate": 0.75,
        "server_acceptance_per_position": [0.9, 0.6],
    }
    best = best_acceptance_length(invalid, server)
    assert best == {"acceptance_length": 2.5, "acceptance_length_source": "server_counters"}
    assert set(acceptance_difference(invalid, server).values()) == {None}
    assert itl_merged_steps(invalid) is True


def test_best_source_is_null_without_any_measurement() -> None:
    invalid = stream_acceptance(records_with([(1, 3, 5, 3)], finish="stop"), 2)
    none = {"acceptance_length": None, "acceptance_length_source": None}
    assert best_acceptance_length(invalid, {"server_acceptance_length": None}) == none
    assert best_acceptance_length(stream_acceptance(records_with([(1, 2)]), None), {}) == none
    assert itl_merged_steps(stream_acceptance(records_with([(1, 2)]), None)) is None


@settings(max_examples=80, deadline=None)
@given(completed_records(), st.integers(1, 4))
def test_matches_reference_loop(records: list[RequestRecord], k: int) -> None:
    result = stream_acceptance(records, k)
    decode = reference_decode_chunks(records, k)
    assert result["stream_acceptance_decode_chunks"] == len(decode)
    if not decode:
        assert result["stream_acceptance_length"] is None
        return
    if max(decode) > k + 1:  # steps merged: nothing published, the reason says why
        assert result["stream_acceptance_length"] is None
        assert result["stream_acceptance_per_position"] is None
        assert result["stream_acceptance_invalid_reason"] is not None
        return
    assert result["stream_acceptance_invalid_reason"] is None
    length = sum(decode) / len(decode)
    assert result["stream_acceptance_length"] == pytest.approx(length)
    assert result["stream_acceptance_rate"] == pytest.approx((length - 1) / k)
    expected = [sum(1 for t in decode if t - 1 > i) / len(decode) for i in range(k)]
    assert result["stream_acceptance_per_position"] == pytest.approx(expected)
