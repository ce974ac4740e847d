"""Properties of the SSE framer and of event decoding, checked with hypothesis.

- Framing: for any valid event stream (LF / CRLF / CR in any mix, comments, event/id/
  retry/unknown fields, multi-line data, blank lines between events, a byte order mark,
  an unterminated last event), the framer gives exactly what a plain whole-stream
  reading of the WHATWG rules gives -- events, offsets, and whether an unterminated
  event was discarded at the end -- and any split of the stream into reads changes
  nothing.
- Decoding: whatever a server sends, decode_event either returns validated fields or
  raises MalformedEvent; nothing downstream (token counting, the ingest) can fail on it.
"""

from __future__ import annotations

import itertools
import json
import re
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from loadgen.client.events import (
    MAX_TOKEN_COUNT,
    MalformedEvent,
    StreamEvent,
    TokenCounter,
    decode_event,
)
from loadgen.client.ingest import Exchange
from loadgen.client.sse import SseFramer
from loadgen.tokenizer import load_tokenizer
from loadgen.workload.plan import text_counter

BOM = b"\xef\xbb\xbf"
EOLS = (b"\n", b"\r\n", b"\r")


def reference(stream: bytes) -> tuple[list[tuple[int, bytes]], bool]:
    """The WHATWG interpretation of a whole stream, written the plain way:
    (events as (offset of the block's first line, data), an unterminated event left)."""
    events: list[tuple[int, bytes]] = []
    data: list[bytes] | None = None
    start: int | None = None
    pos = 0
    for match in re.finditer(rb"\r\n|\r|\n", stream):
        line, offset, pos = stream[pos : match.start()], pos, match.end()
        if offset == 0 and line.startswith(BOM):
            line = line[3:]
            if not line:
                continue
        if not line:
            if data is not None and start is not None:
                events.append((start, b"\n".join(data)))
            data = start = None
            continue
        if start is None:
            start = offset
        if line.startswith(b":"):
            continue
        name, _, value = line.partition(b":")
        if name == b"data":
            data = [*(data or []), value[1:] if value.startswith(b" ") else value]
    return events, bool(stream[pos:]) or data is not None


def frame(chunks: list[bytes]) -> tuple[list[tuple[int, bytes]], bool]:
    framer = SseFramer()
    events = [(e.offset, e.data) for chunk in chunks for e in framer.feed(chunk)]
    return events, framer.close()


# A field value: any bytes but line ends (a line end inside would make it two lines).
values = st.binary(max_size=12).map(lambda b: b.replace(b"\r", b"").replace(b"\n", b""))
field_lines = st.one_of(
    st.builds(lambda v, space: b"data:" + (b" " if space else b"") + v, values, st.booleans()),
    st.just(b"data"),
    st.builds(lambda v: b":" + v, values),  # comment (keep-alive)
    st.builds(lambda v: b"event: " + v, values),
    st.builds(lambda v: b"id: " + v, values),
    st.just(b"retry: 100"),
    st.just(b"nocolon"),
    st.builds(lambda v: b'data: {"choices":[],"v":"' + v.hex().encode() + b'"}', values),
)
eols = st.sampled_from(EOLS)
# An event: one or more field lines, each with its own line end, then a blank line.
events = st.builds(
    lambda lines, end: b"".join(line + eol for line, eol in lines) + end,
    st.lists(st.tuples(field_lines, eols), min_size=1, max_size=4),
    eols,
)
streams = st.builds(
    lambda bom, body, tail: (BOM if bom else b"") + b"".join(body) + tail,
    st.booleans(),
    st.lists(st.one_of(events, eols), max_size=8),  # a bare EOL: a blank line between events
    st.one_of(
        st.just(b""), field_lines, st.builds(lambda line, eol: line + eol, field_lines, eols)
    ),  # cut short at the end
)


@settings(max_examples=400, deadline=None)
@given(streams, st.lists(st.integers(min_value=0, max_value=1 << 16), max_size=10))
def test_any_split_of_any_stream_frames_as_the_whole_stream_reads(
    stream: bytes, cuts: list[int]
) -> None:
    whole = frame([stream])
    assert whole == reference(stream)
    bounds = [0, *sorted(c % (len(stream) + 1) for c in cuts), len(stream)]
    assert frame([stream[a:b] for a, b in itertools.pairwise(bounds)]) == whole


@settings(max_examples=100, deadline=None)
@given(streams)
def test_byte_by_byte_frames_as_the_whole_stream(stream: bytes) -> None:
    assert frame([stream[i : i + 1] for i in range(len(stream))]) == reference(stream)


@pytest.mark.parametrize("eol", EOLS, ids=["lf", "crlf", "cr"])
def test_complete_last_event_is_not_held_back(eol: bytes) -> None:
    """The issue's case: a read ending in a complete line end dispatches at once."""
    framer = SseFramer()
    events = framer.feed(b"data: {}" + eol + eol + b"data: [DONE]" + eol + eol)
    assert [e.data for e in events] == [b"{}", b"[DONE]"] and not framer.pending
    assert framer.close() is False


def test_cr_then_lf_in_the_next_read_is_one_line_end() -> None:
    framer = SseFramer()
    assert [e.data for e in framer.feed(b"data: a\r")] == []
    assert [e.data for e in framer.feed(b"\n\r")] == [b"a"]  # CRLF, then a blank line (CR)
    assert framer.feed(b"\ndata: b\r\n") == []  # that LF completes the CR: no extra line
    assert [(e.offset, e.data) for e in framer.feed(b"\r\n")] == [(11, b"b")]


# --- decode_event fuzz -------------------------------------------------------------------

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=8,
)
counts = st.one_of(st.integers(min_value=-3, max_value=MAX_TOKEN_COUNT + 3), json_values)
deltas = st.fixed_dictionaries(
    {},
    optional={
        "content": json_values,
        "reasoning_content": json_values,
        "reasoning": json_values,
        "role": json_values,
    },
)
choices = st.fixed_dictionaries(
    {},
    optional={
        "index": json_values,
        "text": st.one_of(st.text(max_size=8), json_values),
        "token_ids": st.one_of(st.lists(st.integers(0, 10**6), max_size=4), json_values),
        "finish_reason": st.one_of(st.sampled_from(["length", "stop"]), json_values),
        "delta": st.one_of(deltas, json_values),
        "logprobs": st.one_of(
            st.fixed_dictionaries({}, optional={"tokens": json_values, "content": json_values}),
            json_values,
        ),
    },
)
chunks = st.fixed_dictionaries(
    {},
    optional={
        "choices": st.one_of(st.lists(st.one_of(choices, json_values), max_size=2), json_values),
        "usage": st.one_of(
            st.fixed_dictionaries(
                {}, optional={"completion_tokens": counts, "prompt_tokens": counts}
            ),
            json_values,
        ),
        "error": json_values,
        "object": st.sampled_from(["error", "text_completion", "chat.completion.chunk"]),
    },
)
payloads = st.one_of(
    chunks.map(lambda c: json.dumps(c).encode()),  # json: it writes ints beyond 64 bits
    json_values.map(lambda v: json.dumps(v).encode()),
    st.binary(max_size=64),
    st.sampled_from([b"[DONE]", b"", b"NaN", b"1e400", b'"\\ud800"', b"{" * 2000]),
)


@pytest.fixture(scope="module")
def count_text() -> Any:
    tokenizer: Tokenizer = load_tokenizer()
    return text_counter(tokenizer)


def _is_count(value: Any) -> bool:
    return value is None or (type(value) is int and 0 <= value <= MAX_TOKEN_COUNT)


@settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads)
def test_decode_event_validates_or_raises_malformed(count_text: Any, payload: bytes) -> None:
    try:
        event = decode_event(payload)
    except MalformedEvent as exc:
        assert str(exc)  # the reason, for error_detail
        return
    assert type(event) is StreamEvent
    assert all(
        _is_count(v)
        for v in (event.token_ids, event.logprobs, event.completion_tokens, event.prompt_tokens)
    )
    assert type(event.text) is str
    assert event.finish_reason is None or type(event.finish_reason) is str
    assert event.error is None or type(event.error) is str
    # Nothing downstream can fail on a validated event, nor produce a negative count.
    counter = TokenCounter(count_text)
    assert counter.count(event) >= 0
    state = Exchange(max_tokens=16)
    state.on_event(event, 1, TokenCounter(count_text))
    assert all(t > 0 for t in state.chunk_tokens)
    assert state.completion_tokens is None or 0 <= state.completion_tokens <= 16 + 64


def test_deeply_nested_error_object_is_described_not_recursed() -> None:
    """str() of a 1,000-deep list recursed past Python's limit: found by the fuzz."""
    nested = b"[" * 1000 + b"]" * 1000
    for payload in (
        b'{"error":' + nested + b"}",
        b'{"error":{"message":' + nested + b"}}",
        b'{"choices":[{"text":' + nested + b"}]}",
    ):
        try:
            event = decode_event(payload)
        except MalformedEvent:
            continue
        assert event.error is not None and len(event.error) < 200
