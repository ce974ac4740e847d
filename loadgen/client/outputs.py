"""`--record-outputs`: what a request generated, kept as it streams (docs/results.md, `output`).

The ingest hands every decoded event to its request's content sink, when it has one
(`Exchange.sink`): a request without one pays the one `is None` check the --live-history
reply always cost, nothing more. With one, the sink appends the event's token ids to a
uint32 array (4 bytes a token) and its text, UTF-8, to a bytearray; the digest, the base64 and the
prompt's digest are computed once, when the request has ended.
"""

from __future__ import annotations

import base64
import hashlib
import sys
from array import array
from typing import Any, Protocol

import orjson

from loadgen.client.events import StreamEvent
from loadgen.records import OutputBasis, RequestOutput
from loadgen.workload.reply import ReplyText

THINK_CLOSE = "</think>"  # DeepSeek-V4's end of thinking, one token (id 128822)
DIGEST_BYTES = 16  # blake2b-128: no two of a run's outputs collide by chance


class ContentSink(Protocol):
    """Takes every decoded event of one request (the ingest, off the timing path)."""

    def take(self, event: StreamEvent) -> None: ...


class ReplySink:
    """--live-history: the text goes to the session's ReplyText."""

    __slots__ = ("reply",)

    def __init__(self, reply: ReplyText) -> None:
        self.reply = reply

    def take(self, event: StreamEvent) -> None:
        text = event[4]
        if text:
            self.reply.add(text, event[10])


class OutputKeeper:
    """The ids and text of one response as they stream (one request's ingest writes it)."""

    __slots__ = (
        "_chunks",
        "_ids",
        "_missing_ids",
        "_reasoning",
        "_saw_ids",
        "_text",
        "_think_end",
    )

    def __init__(self) -> None:
        self._ids = array("I")
        # UTF-8 as it arrives: 1-4 bytes a character while the request streams, where a
        # list of the chunks' str objects held ~50 bytes more per chunk
        self._text = bytearray()
        self._reasoning = bytearray()
        self._saw_ids = False
        self._missing_ids = False  # some text came without ids: the text identifies it
        # Where the content's `</think>` came (metrics/phases.py, end_token_text): the
        # request's token-bearing chunks so far (its Exchange's list, `watch`), and the
        # index of the chunk whose text held it, with whether answer text followed it there
        self._chunks: list[int] = []
        self._think_end: tuple[int, bool] | None = None

    def watch(self, chunks: list[int]) -> None:
        """The request's chunk arrivals as they are appended (an event is taken before its
        own chunk is): `len(chunks)` is the index its chunk gets."""
        self._chunks = chunks

    def take(self, event: StreamEvent) -> None:
        text = event[4]
        if text:
            # (both decoders refuse a lone surrogate: every text encodes)
            if event[10]:
                self._reasoning.extend(text.encode())
            else:
                self._text.extend(text.encode())
                if self._think_end is None and THINK_CLOSE in text:
                    after = text[text.index(THINK_CLOSE) + len(THINK_CLOSE) :]
                    self._think_end = (len(self._chunks), bool(after))
        ids = event[11]
        if ids is None:
            if text and event[1]:
                self._missing_ids = True
            return
        self._saw_ids = True
        if not self._missing_ids:
            # fromlist: three times extend's speed on a list, and all or nothing; the
            # reference decoder checked a list, not its items (a str, a -1 raise here)
            try:
                self._ids.fromlist(ids)
            except (TypeError, OverflowError):
                self._missing_ids = True

    def output(self, finish_reason: str | None, body: bytes) -> RequestOutput:
        """The kept output, once the request has ended (`body`: the request it answers)."""
        text, reasoning = self._text.decode(), self._reasoning.decode()
        if self._saw_ids and not self._missing_ids:
            ids = self._ids
            if sys.byteorder == "big":  # the stored bytes are little-endian everywhere
                ids = array("I", ids)
                ids.byteswap()
            raw = ids.tobytes()
            basis, packed = OutputBasis.TOKEN_IDS, base64.b64encode(raw).decode()
        else:
            raw = bytes(self._text + self._reasoning)
            basis, packed = OutputBasis.TEXT, None
        return RequestOutput(
            basis=basis,
            digest=_digest(raw),
            text=text,
            token_ids=packed,
            finish_reason=finish_reason,
            prompt_digest=prompt_digest(body),
            reasoning=reasoning,
            think_end_chunk=None if self._think_end is None else self._think_end[0],
            answer_in_think_end_chunk=self._think_end is not None and self._think_end[1],
        )


class Both:
    """--live-history and --record-outputs together."""

    __slots__ = ("first", "second")

    def __init__(self, first: ContentSink, second: ContentSink) -> None:
        self.first, self.second = first, second

    def take(self, event: StreamEvent) -> None:
        self.first.take(event)
        self.second.take(event)


def content_sink(reply: ReplyText | None, keeper: OutputKeeper | None) -> ContentSink | None:
    """The one sink a request's events go to, chosen once per request (None: none)."""
    if reply is None:
        return keeper
    if keeper is None:
        return ReplySink(reply)
    return Both(ReplySink(reply), keeper)


def _digest(data: bytes) -> str:
    return hashlib.blake2b(data, digest_size=DIGEST_BYTES).hexdigest()


def prompt_digest(body: bytes) -> str:
    """The request's prompt (completions) or messages (chat), hashed: requests of two lanes
    with the same seed carry the same prompts, whatever else their bodies say (the model
    name). A body that is not a JSON object is hashed whole."""
    try:
        request: Any = orjson.loads(body)
    except orjson.JSONDecodeError:
        return _digest(body)
    if not isinstance(request, dict):
        return _digest(body)
    prompt = request.get("prompt", request.get("messages"))
    return _digest(orjson.dumps(prompt, option=orjson.OPT_SORT_KEYS))
