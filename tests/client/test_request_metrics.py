"""vLLM 0.32's per-request `metrics` on the final usage chunk: both event decoders read it
alike (the shape is vLLM's: entrypoints/generate/base/protocol.py PerRequestMetrics and
SpeculativeDecodingMetrics), and a histogram its counts contradict is malformed."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from loadgen.client.events import MalformedEvent, MetricsEvent, StreamEvent, decode_event
from loadgen.client.fast_events import decode_event_fast
from loadgen.records import ServerTimings, SpecDecodeStats

SPEC = {
    "mean_acceptance_length": 2.5,
    "draft_acceptance_rate": 0.5,
    "acceptance_histogram": [1, 0, 1, 2],
    "num_spec_steps": 4,
    "num_accepted_draft_tokens": 8,
    "num_draft_tokens": 12,
    "num_spec_tokens": 3,
}


def final_chunk(metrics: Any) -> bytes:
    return orjson.dumps(
        {
            "id": "cmpl-1",
            "object": "text_completion",
            "created": 1,
            "model": "m",
            "choices": [],
            "usage": {"prompt_tokens": 9, "total_tokens": 20, "completion_tokens": 11},
            "system_fingerprint": "fp",
            "metrics": metrics,
        }
    )


@pytest.mark.parametrize("decode", [decode_event, decode_event_fast])
def test_timings_and_spec_stats_are_read(decode: Any) -> None:
    metrics = {
        "time_to_first_token_ms": 12.5,
        "generation_time_ms": 80.0,
        "queue_time_ms": 0.25,
        "mean_itl_ms": 8.0,
        "tokens_per_second": 120.0,
        "speculative_decoding": {
            **SPEC,
            "per_step_accepted": [0, 2, 3, 3],
            "per_step_drafted": [3, 3, 3, 3],
        },
    }
    event = decode(final_chunk(metrics))
    assert type(event) is MetricsEvent and event.completion_tokens == 11
    spec, timings = event.metrics
    assert spec == SpecDecodeStats(2.5, 0.5, (1, 0, 1, 2), 4, 8, 12, 3, (0, 2, 3, 3), (3, 3, 3, 3))
    assert timings == ServerTimings(0.25, 12.5, 80.0, 8.0, 120.0)


@pytest.mark.parametrize("decode", [decode_event, decode_event_fast])
def test_summary_level_without_timings(decode: Any) -> None:
    spec, timings = decode(final_chunk({"speculative_decoding": SPEC})).metrics
    assert spec is not None and spec.per_step_accepted is None and timings is None


@pytest.mark.parametrize("decode", [decode_event, decode_event_fast])
def test_a_chunk_without_metrics_is_a_plain_event(decode: Any) -> None:
    event = decode(final_chunk(None))
    assert type(event) is StreamEvent


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"num_spec_steps": 5}, "disagree with its histogram"),
        ({"acceptance_histogram": [1, 0, 3]}, "has 3 bins, expected num_spec_tokens"),
        ({"num_draft_tokens": 7}, "cannot hold 8 accepted"),
        ({"per_step_accepted": [1, 2]}, "must both list the 4 steps"),
        ({"num_spec_tokens": "3"}, "Expected `int`"),
        ({"surprise": 1}, "unknown field"),
    ],
)
def test_contradicting_stats_are_malformed_in_both_decoders(
    change: dict[str, Any], message: str
) -> None:
    data = final_chunk({"speculative_decoding": {**SPEC, **change}})
    outcomes = []
    for decode in (decode_event, decode_event_fast):
        with pytest.raises(MalformedEvent, match=message) as caught:
            decode(data)
        outcomes.append(str(caught.value))
    assert outcomes[0] == outcomes[1]


def test_a_negative_server_duration_is_malformed() -> None:
    with pytest.raises(MalformedEvent, match="queue_time_ms"):
        decode_event_fast(final_chunk({"queue_time_ms": -1.0}))
