"""--record-outputs' keeper (client/outputs.py): what it keeps from the decoded events,
by either decoder, and how a record carries it to disk and back."""

from __future__ import annotations

import hashlib
import struct
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.client.events import MalformedEvent, TokenCounter, decode_event
from loadgen.client.fast_events import decode_event_fast
from loadgen.client.ingest import Exchange
from loadgen.client.outputs import OutputKeeper, prompt_digest
from loadgen.records import OutputBasis, RequestRecord, TokenSource
from loadgen.results.jsonl import JsonlSink, read_jsonl

BODY = orjson.dumps({"model": "m", "prompt": "Hi there", "max_tokens": 8, "seed": 3})


def chunk(text: str, ids: list[Any] | None, finish: str | None = None) -> bytes:
    choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish}
    if ids is not None:
        choice["token_ids"] = ids
    return orjson.dumps({"id": "c", "object": "text_completion", "choices": [choice]})


def kept(payloads: list[bytes], decode: Any = decode_event_fast) -> Any:
    keeper = OutputKeeper()
    state = Exchange(max_tokens=64, keeper=keeper)
    counter = TokenCounter()
    for stamp, payload in enumerate(payloads):
        state.on_event(decode(payload), stamp, counter)
    return keeper.output(state.finish_reason, BODY)


@pytest.mark.parametrize("decode", [decode_event_fast, decode_event])
def test_token_ids_are_kept_as_received_with_their_digest(decode: Any) -> None:
    output = kept(
        [chunk("He", [9, 70000]), chunk("llo", [2**32 - 1]), chunk("", [5], "stop")], decode
    )
    assert output.basis is OutputBasis.TOKEN_IDS
    assert output.ids() == (9, 70000, 2**32 - 1, 5)
    raw = struct.pack("<4I", 9, 70000, 2**32 - 1, 5)  # little-endian uint32, whatever the host
    assert output.digest == hashlib.blake2b(raw, digest_size=16).hexdigest()
    assert output.text == "Hello" and output.finish_reason == "stop"
    assert output.prompt_digest == prompt_digest(orjson.dumps({"prompt": "Hi there", "x": 1}))


@pytest.mark.parametrize(
    "payloads",
    [
        [chunk("He", [9]), chunk("llo", None)],  # a chunk of text without ids
        [chunk("He", ["9"])],  # ids that are no token ids (the reference decoder lets a list by)
        [chunk("He", [-1])],
        [chunk("He", None)],  # a server without return_token_ids
    ],
)
def test_without_usable_ids_the_text_identifies_the_output(payloads: list[bytes]) -> None:
    output = kept(payloads, decode_event)
    assert output.basis is OutputBasis.TEXT and output.token_ids is None
    assert output.digest == hashlib.blake2b(output.text.encode(), digest_size=16).hexdigest()
    assert output.ids() is None


def test_chat_reasoning_is_kept_apart() -> None:
    def delta(**fields: Any) -> bytes:
        choice = {"index": 0, "delta": fields, "finish_reason": None, "token_ids": [1]}
        return orjson.dumps({"id": "c", "object": "chat.completion.chunk", "choices": [choice]})

    output = kept([delta(reasoning="think"), delta(content="answer")])
    assert (output.reasoning, output.text) == ("think", "answer")


def test_no_keeper_no_sink() -> None:
    assert Exchange(max_tokens=4).sink is None


def test_the_output_goes_to_disk_and_back(tmp_path: Path) -> None:
    output = kept([chunk("ab", [1, 2], "length")])
    record = RequestRecord(
        request_id=0,
        conc=1,
        input_len=3,
        max_tokens=2,
        scheduled_ns=0,
        start_ns=1,
        connect_ns=0,
        chunk_ns=(2,),
        chunk_tokens=(2,),
        end_ns=3,
        token_source=TokenSource.TOKEN_IDS,
        output=output,
    )
    path = tmp_path / "r.jsonl"
    with JsonlSink(path) as sink:
        sink.write(record)
    (back,) = read_jsonl(path)
    assert back == record and back.output is not None and back.output.ids() == (1, 2)
    assert RequestRecord.from_dict(orjson.loads(record.to_json())) == record


@pytest.mark.parametrize("decode", [decode_event_fast, decode_event])
def test_no_lone_surrogate_reaches_the_keeper(decode: Any) -> None:
    # the keeper encodes every text as UTF-8: the decoders must refuse what cannot be
    with pytest.raises(MalformedEvent):
        decode(b'{"choices": [{"index": 0, "text": "a\\ud800b"}]}')
