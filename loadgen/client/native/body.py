"""Framing and decoding an event-stream body off the timing path, from stamped pieces.

The protocol's data callback only stamps and appends (stamp, bytes) per read; on the
ingest's turn it de-chunks them (protocol.py) into (stamp, body bytes) pieces. Here each
piece is split into
events with `bytes.find` (memchr) and each event decoded (`decode_event`) and counted
with the stamp of the piece holding its first byte -- exact, with no offset bookkeeping.

The split here covers the framing vLLM and the simulator send (`data: <json>\\n\\n`, LF
only, one data line per event). At the first byte it does not cover (a comment, a CR, a
second field or data line, `data:` without the space) the stream switches for good to
the general WHATWG framer (sse.py `SseFramer`, with an ArrivalLog for the stamps),
starting at that event's first byte: every framing rule lives in one place, and this is
only a shortcut for the common case.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Protocol

from loadgen.client.events import TokenCounter
from loadgen.client.fast_events import decode_event_fast as decode_event
from loadgen.client.ingest import Exchange
from loadgen.client.sse import ArrivalLog, SseFramer

Piece = tuple[int, bytes]  # (arrival stamp, body bytes of that read)
Read = tuple[int, int]  # (arrival stamp, end offset of that read's bytes in a buffer)
_SEPARATOR = b"\n\n"
_DATA = b"data: "
# An event still unfinished past this many bytes goes to the framer, which appends a
# long line in linear time; the shortcut re-joins and re-searches it per read.
_PENDING_LIMIT = 1 << 16


class PieceSource(Protocol):
    """Where the protocol appends a body's pieces (the native Response)."""

    pieces: list[Piece]

    def stop(self, error: Exception) -> None:
        """End the response now with `error` and close its connection."""


class EventStream:
    """Parse state of one streamed body. The protocol feeds it each body piece as the
    ingest de-chunks it (never raises); the exchange calls `finish` once the body has
    ended (parses the rest, raises a parse error or records a missing [DONE])."""

    __slots__ = (
        "_fed",
        "_framer",
        "_log",
        "_pending",
        "_pending_reads",
        "_shortcut_used",
        "closed",
        "counter",
        "error",
        "last_stamp",
        "source",
        "state",
    )

    def __init__(self, source: PieceSource, state: Exchange, counter: TokenCounter) -> None:
        self.source = source  # the protocol appends to source.pieces; drain takes them
        self.state = state
        self.counter = counter
        self.error: Exception | None = None
        self.closed = False
        self.last_stamp = 0
        self._pending = b""  # the start of an event whose end has not arrived
        self._pending_reads: list[Read] = []  # the reads that brought _pending's bytes
        self._framer: SseFramer | None = None  # set once the body left the common framing
        self._log = ArrivalLog()  # stamps of the bytes given to the framer
        self._fed = 0
        self._shortcut_used = False  # an event was framed here: the body is past its start

    def drain(self) -> None:
        """Frame the pieces that wait in the source (those that came before `feed` was
        the response's sink)."""
        source = self.source
        pieces = source.pieces
        if pieces:
            source.pieces = []
            feed = self.feed
            for stamp, data in pieces:
                feed(stamp, data)

    def feed(self, stamp: int, data: bytes) -> None:
        """One de-chunked body piece and its read's stamp (the protocol's body sink)."""
        state = self.state
        if state.done or self.closed or self.error is not None:
            return  # nothing after [DONE], an error event or a parse error counts
        try:
            # The common case inline: one whole `data: ...\n\n` event, nothing pending.
            # (No slicing but the payload: each slice is an allocation.)
            end = data.find(b"\n")
            if (
                end == len(data) - 2
                and data[-1] == 10
                and not self._pending
                and self._framer is None
                and data.startswith(_DATA)
                and b"\r" not in data
            ):
                self.last_stamp = stamp
                self._shortcut_used = True
                state.on_event(decode_event(data[6:end]), stamp, self.counter)
            else:
                self._frame(data, stamp)
        except Exception as exc:  # kept for finish(): the transport classifies it
            self.error = exc
            # Nothing after it counts: end the response now rather than read on until
            # the server stops (a line that never ends never stops).
            self.source.stop(exc)

    def _frame(self, body: bytes, stamp: int) -> None:
        self.last_stamp = stamp
        if self._framer is not None:
            self._framed(body, ((stamp, len(body)),))
            return
        pending = self._pending
        if pending:  # an event's start came in earlier reads: each keeps its own stamp
            data, reads = pending + body, [*self._pending_reads, (stamp, len(pending) + len(body))]
        else:
            data, reads = body, [(stamp, len(body))]
        if b"\r" in body or len(pending) > _PENDING_LIMIT:
            self._switch(data, reads)
            return
        state, counter = self.state, self.counter
        end = data.find(_SEPARATOR)
        pos = 0
        while end >= 0:
            # One `data: ` line up to the blank line; anything else goes to the framer.
            if not data.startswith(_DATA, pos) or data.find(b"\n", pos, end) >= 0:
                self._switch(data[pos:], _after(reads, pos))
                return
            self._shortcut_used = True
            # pos 0: the event starts with the oldest pending byte; past it, a separator
            # always ends past the old pending bytes, so the rest arrived now.
            state.on_event(
                decode_event(data[pos + 6 : end]), stamp if pos else reads[0][0], counter
            )
            if state.done:
                return
            pos = end + 2
            end = data.find(_SEPARATOR, pos)
        self._pending = data[pos:] if pos < len(data) else b""
        self._pending_reads = _after(reads, pos) if self._pending else []

    def _switch(self, data: bytes, reads: Sequence[Read]) -> None:
        """From here on the SseFramer frames this body; `reads` say when its bytes came."""
        self._pending = b""
        self._pending_reads = []
        self._framer = SseFramer()
        if self._shortcut_used:
            # The framer takes a byte order mark at its offset 0 as the stream's own; past
            # the body's start it is not one. A blank line first (a no-op) keeps it so.
            self._framed(b"\n", ((reads[0][0], 1),))
        self._framed(data, reads)

    def _framed(self, data: bytes, reads: Sequence[Read]) -> None:
        log = self._log
        fed = self._fed
        for stamp, end in reads:
            log.add(stamp, fed + end)
        self._fed = fed + len(data)
        assert self._framer is not None
        state, counter = self.state, self.counter
        for offset, payload in self._framer.feed(data):
            if state.done:
                return
            state.on_event(decode_event(payload), log.stamp_of(offset), counter)

    def _close_framing(self) -> bool:
        """End of body: True when an unterminated event was discarded (as SseFramer.close)."""
        pending = self._pending
        if pending:  # the framer decides what an unterminated event is (a blank line is not)
            self._switch(pending, self._pending_reads)
        return self._framer is not None and self._framer.close()

    def finish(self) -> None:
        """The body ended: parse the rest; raise its error or record a missing [DONE]."""
        self.drain()
        self.closed = True
        if self.error is not None:
            raise self.error
        cut = self._close_framing()  # an unterminated last event is discarded (WHATWG)
        self.state.body_ended(self.last_stamp, cut)


def _after(reads: Sequence[Read], pos: int) -> list[Read]:
    """`reads` for the bytes from `pos` on (a buffer cut at pos)."""
    return [(stamp, end - pos) for stamp, end in reads if end > pos]
