"""The native client's framing shortcut gives exactly what SseFramer + ArrivalLog give.

EventStream (native/body.py) frames the common `data: <json>\\n\\n` case itself and hands
anything else to SseFramer from that event on. Whatever the bytes and however they are
split into reads, the events, their token counts, their stamps and the outcome must be
those of the aiohttp path's BodyStream over the same reads.
"""

from __future__ import annotations

import itertools
import time
from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from loadgen.client.events import TokenCounter
from loadgen.client.ingest import BodyStream, Exchange, Ingest
from loadgen.client.native.body import EventStream, Piece
from loadgen.client.sse import ArrivalLog


def data_event(tokens: int, sep: str = "\n", space: bool = True) -> str:
    payload = orjson.dumps(
        {"choices": [{"index": 0, "text": "t", "token_ids": list(range(tokens))}]}
    ).decode()
    return f"data:{' ' if space else ''}{payload}{sep}{sep}"


# Canonical events most of the time, and now and then a framing the shortcut must not
# take: a comment, CRLF or CR line ends, `data:` without its space, an `event:` field,
# a blank line too many, a data payload split over two data lines, broken JSON.
EVENT = st.one_of(
    st.integers(1, 4).map(data_event),
    st.integers(1, 4).map(data_event),
    st.integers(1, 4).map(data_event),
    st.just(": keep-alive\n\n"),
    st.integers(1, 3).map(lambda n: data_event(n, "\r\n")),
    st.integers(1, 3).map(lambda n: data_event(n, "\r")),
    st.integers(1, 3).map(lambda n: data_event(n, space=False)),
    st.integers(1, 3).map(lambda n: "event: completion\n" + data_event(n)),
    st.just("\n"),
    st.just('data: {"choices":[{"index":0,\ndata: "token_ids":[1,2]}]}\n\n'),
    st.just("data: {not json\n\n"),
    st.integers(1, 2).map(lambda n: "\ufeff" + data_event(n)),  # a BOM: only the first is one
)


class Reads:
    """The native Response's side: pieces appended by the protocol."""

    def __init__(self) -> None:
        self.pieces: list[Piece] = []
        self.stopped: list[Exception] = []

    def stop(self, error: Exception) -> None:
        self.stopped.append(error)


class Content:
    """aiohttp's StreamReader as BodyStream reads it."""

    def __init__(self) -> None:
        self.buffer = b""

    def read_nowait(self) -> bytes:
        data, self.buffer = self.buffer, b""
        return data


def outcome(state: Exchange, error: Exception | None) -> tuple[object, ...]:
    return (
        tuple(state.chunk_ns),
        tuple(state.chunk_tokens),
        state.done,
        state.error,
        state.detail,
        state.end_ns,
        type(error).__name__ if error else None,
    )


def run_both(
    body: bytes, cuts: list[int], drain_every: int
) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
    ingest = Ingest()
    native_state, reference_state = Exchange(), Exchange()
    reads, content, log = Reads(), Content(), ArrivalLog()
    native = EventStream(reads, native_state, TokenCounter())
    reference = BodyStream(content, log, reference_state, TokenCounter(), ingest)
    bounds = sorted({0, len(body), *cuts})
    received = 0
    for number, (start, end) in enumerate(itertools.pairwise(bounds)):
        stamp = 1_000 * (number + 1)
        part = body[start:end]
        reads.pieces.append((stamp, part))
        content.buffer += part
        received += len(part)
        log.add(stamp, received)
        if number % drain_every == 0:  # the ingest gets to the stream now and then
            native.drain()
            reference.drain()
    results = []
    for stream, state in ((native, native_state), (reference, reference_state)):
        error = None
        try:
            stream.finish()
        except Exception as exc:
            error = exc
        results.append(outcome(state, error))
    return results[0], results[1]


@settings(max_examples=300, deadline=None)
@given(
    events=st.lists(EVENT, min_size=1, max_size=12),
    done=st.booleans(),
    data=st.data(),
    drain_every=st.integers(1, 4),
)
def test_native_framing_matches_the_reference(
    events: list[str], done: bool, data: st.DataObject, drain_every: int
) -> None:
    body = ("".join(events) + ("data: [DONE]\n\n" if done else "")).encode()
    cuts = data.draw(st.lists(st.integers(0, len(body)), max_size=8))
    native, reference = run_both(body, cuts, drain_every)
    assert native == reference


@pytest.mark.parametrize("cuts", [[1, 2], [1, 3], [1, 2, 3, 4]])
def test_an_event_after_a_blank_line_has_its_own_first_bytes_stamp(cuts: list[int]) -> None:
    """A blank line, then an event whose first byte came in a later read: the event is
    stamped with that later read (hypothesis found the native path using the blank
    line's read, when bytes pending across several reads kept only the first stamp)."""
    native, reference = run_both(b"\ndata: [DONE]\n\n", cuts, 1)
    assert native == reference


def test_a_huge_event_in_small_reads_is_linear() -> None:
    """Past 64 KB an unfinished event goes to the linear framer: 8 MB in 4 KB reads."""
    payload = orjson.dumps({"choices": [{"index": 0, "text": "x" * (8 << 20), "token_ids": [1]}]})
    body = b"data: " + payload + b"\n\ndata: [DONE]\n\n"
    reads, state = Reads(), Exchange()
    stream = EventStream(reads, state, TokenCounter())
    started = time.process_time()  # the work done (CPU), not the machine's load
    for i in range(0, len(body), 4096):
        reads.pieces.append((i, body[i : i + 4096]))
        stream.drain()
    stream.finish()
    assert state.chunk_tokens == [1] and state.chunk_ns == [0] and state.done
    assert time.process_time() - started < 5  # quadratic re-joining took minutes


def test_common_framing_never_reaches_the_framer() -> None:
    reads, state = Reads(), Exchange()
    stream = EventStream(reads, state, TokenCounter())
    reads.pieces += [
        (1, data_event(2).encode()),
        (2, (data_event(1) + data_event(3)).encode()),
        (3, b"data: [DONE]\n\n"),
    ]
    stream.finish()
    assert stream._framer is None  # the shortcut took every event
    assert state.chunk_tokens == [2, 1, 3] and state.chunk_ns == [1, 2, 2] and state.done
