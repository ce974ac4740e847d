"""The msgspec fast path decodes exactly as the reference validator (events.decode_event).

Same StreamEvent, or the same MalformedEvent with the same message, for every payload:
random JSON shaped like events (the decode fuzz's strategy), real vLLM events and the
simulator's with random byte mutations, and the edge cases the validator exists for.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loadgen.client.fast_events as fast_events
from loadgen.client.events import MAX_TOKEN_COUNT, MalformedEvent, StreamEvent, decode_event
from loadgen.client.fast_events import decode_event_fast
from loadgen.client.sse import SseFramer

from .test_sse_properties import payloads


def outcome(decode: Any, data: bytes) -> StreamEvent | tuple[str, str]:
    try:
        event = decode(data)
    except MalformedEvent as exc:
        return ("malformed", str(exc))
    assert type(event) is StreamEvent
    return event


def same(data: bytes) -> None:
    assert outcome(decode_event_fast, data) == outcome(decode_event, data), data[:300]


def fixture_payloads(directory: Path) -> list[bytes]:
    found: list[bytes] = []
    for path in sorted(directory.glob("*.sse")):
        framer = SseFramer()
        found += [event.data for event in framer.feed(path.read_bytes())]
    return found


SIM_EVENTS = [
    b'{"id":"cmpl-1","object":"text_completion","created":1764570000,"model":"m",'
    b'"choices":[{"index":0,"text":" the","logprobs":null,"finish_reason":null,'
    b'"stop_reason":null,"prompt_token_ids":null,"token_ids":[12,34]}],'
    b'"usage":{"prompt_tokens":256,"total_tokens":300,"completion_tokens":44}}',
    b'{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m",'
    b'"choices":[{"index":0,"delta":{"content":"\xc3\xa9t\xc3\xa9"},"logprobs":null,'
    b'"finish_reason":"length","token_ids":[5]}],"usage":{"prompt_tokens":9,'
    b'"total_tokens":10,"completion_tokens":1,"completion_tokens_details":null}}',
    b'{"id":"c","object":"text_completion","created":1,"model":"m","choices":[],'
    b'"usage":{"prompt_tokens":9,"total_tokens":20,"completion_tokens":11,'
    b'"prompt_tokens_details":{"cached_tokens":8}},"system_fingerprint":"fp"}',
    b'{"choices":[{"index":0,"text":"ab","logprobs":{"tokens":["a","b"],'
    b'"token_logprobs":[-0.5,null],"text_offset":[0,1],"top_logprobs":[{"a":-0.5},null]}}]}',
    b'{"choices":[{"index":0,"delta":{"reasoning_content":"r"},"logprobs":{"content":'
    b'[{"token":"r","logprob":-9999.0,"bytes":[114],"top_logprobs":[{"token":"r",'
    b'"logprob":-1e-3,"bytes":null}]}],"refusal":null}}]}',
]

EDGE_CASES = [
    b"[DONE]",
    b"",
    b"null",
    b"[]",
    b"{}",
    b'{"choices":null}',
    b'{"choices":{}}',
    b'{"choices":[]}',
    b'{"choices":[1]}',
    b'{"choices":[{}]}',
    b'{"choices":[{},5]}',
    b'{"error":null,"choices":[]}',
    b'{"error":{"message":"boom","type":"X","code":500}}',
    b'{"object":"error","message":"m","choices":[]}',
    b'{"object":5,"choices":[]}',
    b'{"choices":[],"usage":{"completion_tokens":true}}',
    b'{"choices":[],"usage":{"completion_tokens":-1}}',
    b'{"choices":[],"usage":{"completion_tokens":%d}}' % (MAX_TOKEN_COUNT + 1),
    b'{"choices":[],"usage":{"completion_tokens":%d}}' % MAX_TOKEN_COUNT,
    b'{"choices":[],"usage":{"completion_tokens":1.0}}',
    b'{"choices":[],"usage":{"completion_tokens":"3"}}',
    b'{"choices":[],"usage":{"prompt_tokens":4,"prompt_tokens_details":{"cached_tokens":5}}}',
    b'{"choices":[],"usage":{"prompt_tokens_details":{"cached_tokens":5}}}',
    b'{"choices":[],"usage":{"prompt_tokens_details":[]}}',
    b'{"choices":[],"usage":7}',
    b'{"choices":[{"text":5}]}',
    b'{"choices":[{"text":null,"delta":{"content":5}}]}',
    b'{"choices":[{"text":"a","delta":5}]}',
    b'{"choices":[{"delta":5}]}',
    b'{"choices":[{"delta":{"reasoning_content":"","reasoning":"x"}}]}',
    b'{"choices":[{"delta":{"reasoning_content":0,"reasoning":"x"}}]}',
    b'{"choices":[{"delta":{"reasoning_content":7}}]}',
    b'{"choices":[{"token_ids":[1,true]}]}',
    b'{"choices":[{"token_ids":{}}]}',
    b'{"choices":[{"token_ids":[1e400]}]}',
    b'{"choices":[{"token_ids":[' + b"9" * 400 + b"]}]}",
    b'{"choices":[{"token_ids":[18446744073709551616]}]}',
    b'{"choices":[{"finish_reason":5}]}',
    b'{"choices":[{"logprobs":[]}]}',
    b'{"choices":[{"logprobs":{"tokens":5}}]}',
    b'{"choices":[{"logprobs":{}}]}',
    b'{"choices":[{"logprobs":{"tokens":null,"content":[1,2]}}]}',
    b'{"choices":[],"created":1e400}',
    b'{"choices":[],"x":1e400}',
    b'{"choices":[],"id":"\xff"}',
    b'{"choices":[],"id":"\xed\xa0\x80"}',
    b'{"choices":[],"id":"\\ud800"}',
    b'{"choices":[],"x":"\xc0\x80"}',
    b'{"choices":[],"choices":[{"text":"b"}]}',
    b'{"choices":5,"choices":[]}',
    b'{"choices":[],"choices":5}',
    b'{"choices":[{"text":"a","text":"b"}]}',
    b'{"choices":[],"x":' + b"[" * 1100 + b"]" * 1100 + b"}",
    b'{"choices":[],"x":' + b"[" * 500 + b"]" * 500 + b"}",
    b'{"error":' + b"[" * 1000 + b"]" * 1000 + b"}",
    b'\xef\xbb\xbf{"choices":[]}',
    b' {"choices":[]} ',
    b'{"choices":[]}\x0c',
    b'{"choices":[],}',
    b'{"choices":[{"text":"a\nb"}]}',
    b'{"choices":[{"text":"\\u0000"}]}',
]


@pytest.mark.parametrize("data", EDGE_CASES + SIM_EVENTS)
def test_edge_cases_decode_as_the_reference(data: bytes) -> None:
    same(data)


def test_real_vllm_events_decode_as_the_reference(vllm_fixtures: Path) -> None:
    events = fixture_payloads(vllm_fixtures)
    assert len(events) > 20
    for data in events:
        same(data)


def test_the_usual_shapes_take_the_fast_path(
    vllm_fixtures: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """vLLM's own events and the simulator's never need the reference (the point of it)."""

    def refuse(data: bytes) -> StreamEvent:
        raise AssertionError(f"fell back to the reference: {data[:200]!r}")

    monkeypatch.setattr(fast_events, "decode_event", refuse)
    for data in fixture_payloads(vllm_fixtures) + SIM_EVENTS:
        decode_event_fast(data)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(payloads)
def test_random_payloads_decode_as_the_reference(payload: bytes) -> None:
    same(payload)


MUTATION_BYTES = st.sampled_from(
    [
        b"{",
        b"}",
        b"[",
        b"]",
        b'"',
        b",",
        b":",
        b"-",
        b"0",
        b"9",
        b"e",
        b"1e400",
        b"true",
        b"null",
        b"\\",
        b"\\u",
        b"\xff",
        b"\xc3",
        b" ",
        b"\n",
        b"x",
        b'"error":1,',
        b".5",
    ]
)


@settings(max_examples=1500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    base=st.sampled_from(SIM_EVENTS),
    edits=st.lists(
        st.tuples(
            st.sampled_from(["insert", "replace", "delete"]), st.floats(0, 1), MUTATION_BYTES
        ),
        min_size=1,
        max_size=4,
    ),
)
def test_mutated_events_decode_as_the_reference(
    base: bytes, edits: list[tuple[str, float, bytes]]
) -> None:
    data = base
    for kind, where, insert in edits:
        at = int(where * len(data))
        if kind == "insert":
            data = data[:at] + insert + data[at:]
        elif kind == "replace":
            data = data[:at] + insert + data[at + 1 :]
        else:
            data = data[:at] + data[at + 1 :]
    same(data)


@settings(max_examples=500, deadline=None)
@given(
    st.fixed_dictionaries(
        {
            "choices": st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        "index": st.integers(-(2**65), 2**65),
                        "text": st.one_of(st.none(), st.text(max_size=6)),
                        "finish_reason": st.one_of(st.none(), st.sampled_from(["stop", "length"])),
                        "token_ids": st.one_of(
                            st.none(), st.lists(st.integers(-(2**65), 2**65), max_size=3)
                        ),
                        "delta": st.fixed_dictionaries(
                            {},
                            optional={
                                "content": st.one_of(st.none(), st.text(max_size=4)),
                                "reasoning_content": st.one_of(st.none(), st.text(max_size=4)),
                            },
                        ),
                    },
                ),
                max_size=2,
            ),
            "usage": st.one_of(
                st.none(),
                st.fixed_dictionaries(
                    {},
                    optional={
                        "prompt_tokens": st.integers(-2, MAX_TOKEN_COUNT + 2),
                        "completion_tokens": st.integers(-2, MAX_TOKEN_COUNT + 2),
                        "prompt_tokens_details": st.one_of(
                            st.none(),
                            st.fixed_dictionaries(
                                {}, optional={"cached_tokens": st.integers(-2, MAX_TOKEN_COUNT + 2)}
                            ),
                        ),
                    },
                ),
            ),
        }
    )
)
def test_well_formed_events_decode_as_the_reference(chunk: dict[str, Any]) -> None:
    same(json.dumps(chunk).encode())
    same(orjson.dumps(chunk) if all(abs(i) < 2**63 for i in _ints(chunk)) else b"[]")


def _ints(value: Any) -> list[int]:
    if isinstance(value, bool):
        return []
    if isinstance(value, int):
        return [value]
    if isinstance(value, dict):
        return [i for v in value.values() for i in _ints(v)]
    if isinstance(value, list):
        return [i for v in value for i in _ints(v)]
    return []
