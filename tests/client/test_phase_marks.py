"""The client keeps where a chat stream's field changed (content <-> reasoning) while it
parses: the records' `phase_marks`, from which metrics/phases.py splits the phases."""

from __future__ import annotations

import orjson

from loadgen.client.events import TokenCounter
from loadgen.client.fast_events import decode_event_fast
from loadgen.client.ingest import Exchange


def _chunk(field: str | None, text: str, ids: list[int]) -> bytes:
    delta = {} if field is None else {field: text}
    choice = {"index": 0, "delta": delta, "token_ids": ids, "finish_reason": None}
    return orjson.dumps({"id": "r", "object": "chat.completion.chunk", "choices": [choice]})


def _marks(payloads: list[bytes]) -> tuple[list[int], int, int]:
    state, counter = Exchange(), TokenCounter()
    for stamp, payload in enumerate(payloads):
        state.on_event(decode_event_fast(payload), stamp, counter)
    return state.phase_marks, state.textless_phase_chunks, len(state.chunk_ns)


def test_reasoning_then_content_marks_both_changes() -> None:
    payloads = [
        _chunk("reasoning_content", "Let", [1]),
        _chunk("reasoning", " me", [2, 3]),  # vLLM's newer field name
        _chunk(None, "", [128822]),  # the parser swallowed </think>: ids, no text
        _chunk("content", "Yes", [4]),
        _chunk("content", ".", [5]),
    ]
    marks, textless, chunks = _marks(payloads)
    assert marks == [0, 3]
    assert textless == 1  # kept in the reasoning phase it came in, and counted
    assert chunks == 5


def test_content_only_leaves_no_mark() -> None:
    assert _marks([_chunk("content", "a", [1]), _chunk("content", "b", [2])]) == ([], 0, 2)


def test_reasoning_after_content_is_marked_where_it_came() -> None:
    payloads = [
        _chunk("content", "a", [1]),
        _chunk("reasoning_content", "b", [2]),
        _chunk("content", "c", [3]),
    ]
    assert _marks(payloads)[0] == [1, 2]
