"""SSE framing (any byte split) and stream-event decoding against real vLLM captures."""

from __future__ import annotations

import itertools
from pathlib import Path

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from loadgen.client.events import MalformedEvent, TokenCounter, decode_event
from loadgen.client.sse import ArrivalLog, SseFramer
from loadgen.records import TokenSource
from loadgen.workload.bodies import BodyOptions, chat_body, completion_body

STREAM = (
    b': ping\n\ndata: {"a":1}\n\ndata: x\r\ndata: y\r\n\r\nevent: e\ndata:z\n\ndata: [DONE]\n\n'
)


def frame_all(chunks: list[bytes]) -> list[tuple[int, bytes]]:
    framer = SseFramer()
    return [(e.offset, e.data) for c in chunks for e in framer.feed(c)]


def test_framer_events_and_offsets() -> None:
    events = frame_all([STREAM])
    assert [d for _, d in events] == [b'{"a":1}', b"x\ny", b"z", b"[DONE]"]
    for offset, _ in events:  # each offset points at the first byte of its event block
        assert STREAM[offset:].startswith((b"data:", b"event:"))


@given(st.lists(st.integers(min_value=0, max_value=len(STREAM)), max_size=12))
def test_framer_any_split_same_events(cuts: list[int]) -> None:
    bounds = [0, *sorted(cuts), len(STREAM)]
    chunks = [STREAM[a:b] for a, b in itertools.pairwise(bounds)]
    assert frame_all(chunks) == frame_all([STREAM])


def test_framer_pending_when_cut_mid_event() -> None:
    framer = SseFramer()
    framer.feed(b'data: {"a":')
    assert framer.pending


def test_arrival_log_maps_offsets_to_reads() -> None:
    log = ArrivalLog()
    log.add(100, 10)
    log.add(200, 10)  # a read with no body bytes (chunk framing only) is not an arrival
    log.add(300, 25)
    assert [log.stamp_of(o) for o in (0, 9, 10, 24)] == [100, 100, 300, 300]


def _events(path: Path) -> list[bytes]:
    return [e.data for e in SseFramer().feed(path.read_bytes())]


@pytest.mark.parametrize(
    "name", ["completions_stream_token_ids_usage.sse", "chat_stream_token_ids_usage.sse"]
)
def test_vllm_capture_token_ids(vllm_fixtures: Path, name: str) -> None:
    counter = TokenCounter()
    counts = [counter.count(decode_event(d)) for d in _events(vllm_fixtures / name)]
    chunks = [c for c in counts if c]
    assert sum(chunks) == 24  # max_tokens 24 in the capture
    assert chunks[0] == 1 and set(chunks[1:-1]) == {4}  # draft == target: all accepted
    assert counter.source is TokenSource.TOKEN_IDS
    assert decode_event(_events(vllm_fixtures / name)[-1]).done


def test_vllm_capture_without_token_ids_uses_text(vllm_fixtures: Path) -> None:
    counter = TokenCounter(count_text=lambda text: 7)
    counts = [
        counter.count(decode_event(d)) for d in _events(vllm_fixtures / "completions_stream.sse")
    ]
    assert counter.source is TokenSource.TEXT  # flagged approximate
    assert all(c in (0, 7) for c in counts)


def test_usage_deltas_and_logprobs() -> None:
    counter = TokenCounter()
    ev = decode_event(b'{"choices":[{"text":"ab"}],"usage":{"completion_tokens":3}}')
    assert counter.count(ev) == 3
    ev = decode_event(b'{"choices":[{"text":"c"}],"usage":{"completion_tokens":5}}')
    assert counter.count(ev) == 2
    final = decode_event(b'{"choices":[],"usage":{"completion_tokens":5,"prompt_tokens":9}}')
    assert counter.count(final) == 0 and final.prompt_tokens == 9
    assert counter.source is TokenSource.USAGE
    lp = TokenCounter()
    ev = decode_event(b'{"choices":[{"text":"ab","logprobs":{"tokens":["a","b"]}}]}')
    assert lp.count(ev) == 2 and lp.source is TokenSource.LOGPROBS


def test_decode_errors() -> None:
    assert decode_event(b'{"error":{"message":"boom","type":"X","code":500}}').error
    assert decode_event(b'{"object":"error","message":"m"}').error
    for bad in (b"{not json", b"[1,2]", b'{"id":1}'):
        with pytest.raises(MalformedEvent):
            decode_event(bad)


def test_request_bodies() -> None:
    options = BodyOptions(endpoint="completions", model="m", temperature=0.0, seed=5)
    body = completion_body(options, "<bos>hi", 16)
    assert body["stream"] and body["ignore_eos"] and body["add_special_tokens"] is False
    assert body["stream_options"] == {"include_usage": True, "continuous_usage_stats": True}
    assert body["return_token_ids"] and body["max_tokens"] == 16 and body["seed"] == 5
    chat = chat_body(
        BodyOptions(endpoint="chat", model="m", thinking="thinking", reasoning_effort="high"),
        [{"role": "user", "content": "x"}],
        8,
    )
    assert chat["chat_template_kwargs"] == {"thinking": True, "reasoning_effort": "high"}
    assert orjson.loads(orjson.dumps(chat))["messages"][0]["content"] == "x"


LF_STREAM = (
    b'data: {"a":1}\n\n: keep-alive\n\ndata: x\ndata: y\n\n\n\nid: 3\ndata: z\n\ndata: [DONE]\n\n'
)


@given(st.lists(st.integers(min_value=0, max_value=len(LF_STREAM)), max_size=12))
def test_framer_fast_path_any_split(cuts: list[int]) -> None:
    """vLLM's LF-only framing takes the fast path; any split gives the same events."""
    bounds = [0, *sorted(cuts), len(LF_STREAM)]
    events = frame_all([LF_STREAM[a:b] for a, b in itertools.pairwise(bounds)])
    assert [d for _, d in events] == [b'{"a":1}', b"x\ny", b"z", b"[DONE]"]
    for offset, _ in events:
        assert LF_STREAM[offset:].startswith((b"data:", b"id:"))


def test_framer_one_event_per_read_matches_line_by_line() -> None:
    """The one-event-per-read path gives the same offsets and data as line-by-line framing."""
    blocks = [b + b"\n\n" for b in LF_STREAM.split(b"\n\n")[:-1]]
    per_read = frame_all(blocks)
    byte_by_byte = frame_all([LF_STREAM[i : i + 1] for i in range(len(LF_STREAM))])
    assert per_read == byte_by_byte
    assert [d for _, d in per_read] == [b'{"a":1}', b"x\ny", b"z", b"[DONE]"]


def test_decode_event_fields_by_name() -> None:
    """Every field lands under its own name (the event is built positionally)."""
    ev = decode_event(
        b'{"id":"cmpl-7","choices":[{"text":"ab","token_ids":[5,6,7],"finish_reason":"length",'
        b'"logprobs":{"tokens":["a","b"]}}],'
        b'"usage":{"completion_tokens":11,"prompt_tokens":9,'
        b'"prompt_tokens_details":{"cached_tokens":4}}}'
    )
    assert ev._asdict() == {
        "done": False,
        "has_choice": True,
        "token_ids": 3,
        "logprobs": 2,
        "text": "ab",
        "completion_tokens": 11,
        "prompt_tokens": 9,
        "finish_reason": "length",
        "error": None,
        "cached_tokens": 4,
        "reasoning": False,
        "ids": [5, 6, 7],  # the ids themselves, kept only under --record-outputs
        "chunk_id": "cmpl-7",
    }
    chat = decode_event(b'{"choices":[{"delta":{"reasoning":"r"},"token_ids":[5]}]}')
    assert (chat.text, chat.reasoning, chat.token_ids) == ("r", True, 1)
    usage_only = decode_event(
        b'{"choices":[],"usage":{"prompt_tokens":9,"total_tokens":20,'
        b'"completion_tokens":11,"prompt_tokens_details":'
        b'{"cached_tokens":8}}}'
    )
    assert (usage_only.cached_tokens, usage_only.has_choice) == (8, False)
    no_details = decode_event(
        b'{"choices":[],"usage":{"prompt_tokens":9,"prompt_tokens_details":null}}'
    )
    assert no_details.cached_tokens is None
    chat = decode_event(b'{"choices":[{"delta":{"reasoning_content":"r"},"logprobs":null}]}')
    assert (chat.text, chat.logprobs, chat.token_ids, chat.finish_reason) == ("r", None, None, None)
    assert type(ev) is type(chat) is type(decode_event(b"[DONE]"))
