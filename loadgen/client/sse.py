"""Incremental Server-Sent-Events framing with arrival stamps.

The transport stamps every socket read (perf_counter_ns) before any parsing and logs,
per response body, how many body bytes had arrived by each stamp (`ArrivalLog`). The
framer here runs later, off the timing path: it splits the body into events and reports
each event's first byte offset, which the log turns back into the arrival time of the
read that carried that byte.

Framing follows the WHATWG event-stream rules (html.spec.whatwg.org, "Server-sent
events", interpreting an event stream):
- a line ends at CRLF, LF or CR, in any mix; a leading UTF-8 BOM is ignored;
- a blank line dispatches the event; `data` lines join with LF; comments (`:`) and
  other fields (`event`, `id`, `retry`) are read past;
- at end of stream an event that no blank line terminated is discarded, not dispatched.
Nothing complete is ever held back: a CR ends its line the moment it arrives, and an LF
that turns out to follow it (perhaps in the next read) is skipped. So a CRLF at the end
of a read is dispatched at once, and end of stream (`close`) has nothing left to flush
but an unterminated event, which it reports.

Cost is linear in the body size however it is split: each byte is searched once, and an
unfinished line is appended to, never re-scanned (a 20 MB event in 1 KB reads costs what
it costs in one read). vLLM's framing (`data: ...\\n\\n`, no CR) keeps its fast paths.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import NamedTuple

from loadgen.client.events import MalformedEvent

_BOM = b"\xef\xbb\xbf"
# The most bytes one event (or one line) may hold before it ends. Far above any real
# event (vLLM's largest, a first chunk with prompt logprobs, is a few MB; the hostile
# tests stream 20 MB in one), and what bounds a line that never ends: it grew without
# limit (6 GB in 20 s), and, bytes still coming, no idle deadline fired.
MAX_EVENT_BYTES = 32 << 20


class ArrivalLog:
    """(stamp, body bytes received so far) per socket read, in arrival order."""

    __slots__ = ("_cursor", "ends", "stamps")

    def __init__(self) -> None:
        self.stamps: list[int] = []
        self.ends: list[int] = []
        self._cursor = 0

    def add(self, stamp_ns: int, total_bytes: int) -> None:
        """Called from the protocol's data callback; a read that added no body bytes is dropped."""
        ends = self.ends
        if total_bytes > (ends[-1] if ends else 0):
            self.stamps.append(stamp_ns)
            ends.append(total_bytes)

    def last_stamp(self) -> int | None:
        return self.stamps[-1] if self.stamps else None

    def stamp_of(self, offset: int) -> int:
        """Arrival stamp of the read that delivered body byte `offset` (offsets only increase)."""
        ends = self.ends
        cursor = self._cursor
        while cursor < len(ends) - 1 and ends[cursor] <= offset:
            cursor += 1
        self._cursor = cursor
        return self.stamps[cursor]


class SseEvent(NamedTuple):  # a tuple: one is built per streamed event
    offset: int  # body offset of the event's first byte
    data: bytes  # the joined `data:` lines


# tuple.__new__ skips the NamedTuple's Python-level __new__ (one event per socket read).
_new_event: Callable[[type[SseEvent], tuple[int, bytes]], SseEvent] = tuple.__new__


class SseFramer:
    """Bytes in any split -> complete events (WHATWG SSE rules: data lines, comments, CR/LF)."""

    __slots__ = ("_after_cr", "_base", "_data", "_partial", "_partial_offset", "_start")

    def __init__(self) -> None:
        self._base = 0  # body offset of the next byte fed
        self._partial = bytearray()  # an unfinished line, carried over to the next read
        self._partial_offset = 0  # body offset of its first byte
        self._after_cr = False  # the last byte fed was a CR: a next LF completes a CRLF
        self._data: list[bytes] | None = None  # data lines of the event being read
        self._start: int | None = None  # offset of the event's first line

    def feed(self, chunk: bytes) -> list[SseEvent]:
        if self._partial or self._start is not None or self._after_cr or b"\r" in chunk:
            return self._feed_lines(chunk)
        # Fastest path: the read is exactly one `data: ...\n\n` event (vLLM, one chunk per
        # read); a one-byte find is a memchr, cheaper than searching for b"\n\n".
        newline = chunk.find(b"\n")
        if newline == len(chunk) - 2 and chunk[-1] == 0x0A and chunk[:6] == b"data: ":
            base = self._base
            self._base = base + len(chunk)
            return [_new_event(SseEvent, (base, chunk[6:newline]))]
        # Fast path (vLLM's framing): whole `data: ...\n\n` blocks, nothing pending.
        # split() finds the same separators as a find() loop would, in one C call.
        blocks = chunk.split(b"\n\n")
        tail = blocks.pop()  # what follows the last separator: b"" when chunk ends with one
        events: list[SseEvent] = []
        base = self._base
        for block in blocks:
            if block[:6] == b"data: " and b"\n" not in block:
                events.append(_new_event(SseEvent, (base, block[6:])))
            else:
                self._block(block, base, events)
            base += len(block) + 2
        self._base = base
        if tail:
            events += self._feed_lines(tail)
        return events

    def close(self) -> bool:
        """End of stream: True when an unterminated event was discarded (WHATWG: not
        dispatched). Nothing complete is pending here: see the module doc."""
        discarded = self.pending
        self._partial.clear()
        self._data = self._start = None
        self._after_cr = False
        return discarded

    @property
    def pending(self) -> bool:
        """Bytes of an unfinished event are buffered (the stream was cut mid-event)."""
        return bool(self._partial) or self._data is not None

    def _block(self, block: bytes, offset: int, events: list[SseEvent]) -> None:
        """One blank-line-terminated block without CR, line by line."""
        for line in block.split(b"\n"):
            self._line(line, offset, events)
            offset += len(line) + 1
        self._line(b"", offset, events)

    def _feed_lines(self, chunk: bytes) -> list[SseEvent]:
        """Line by line, any line endings; linear: each byte is searched for once."""
        events: list[SseEvent] = []
        base = self._base
        size = len(chunk)
        self._base = base + size
        pos = 0
        if self._after_cr and size:
            self._after_cr = False
            if chunk[0] == 0x0A:  # the LF of a CRLF split over two reads
                pos = 1
        find = chunk.find
        lf = find(b"\n", pos) % (size + 1)  # -1 (none left) becomes size
        cr = find(b"\r", pos) % (size + 1)
        while True:
            end = lf if lf < cr else cr  # the nearer line end
            if end == size:
                break
            if self._partial:
                self._partial += chunk[pos:end]
                line, offset = bytes(self._partial), self._partial_offset
                self._partial.clear()
            else:
                line, offset = chunk[pos:end], base + pos
            pos = end + 1
            if end == cr:
                if pos == size:
                    self._after_cr = True
                elif chunk[pos] == 0x0A:  # CRLF: one line end
                    pos += 1
                cr = find(b"\r", pos) % (size + 1)
            if lf < pos:
                lf = find(b"\n", pos) % (size + 1)
            self._line(line, offset, events)
        if pos < size:  # an unfinished line: kept, and never searched again
            if not self._partial:
                self._partial_offset = base + pos
            self._partial += memoryview(chunk)[pos:]
        self._bound()
        return events

    def _bound(self) -> None:
        """Raise when the unfinished event (or line) is past MAX_EVENT_BYTES: once per
        read that leaves something pending, never per event of the fast paths."""
        start = self._start
        if start is None:
            if not self._partial:
                return
            start = self._partial_offset
        if self._base - start > MAX_EVENT_BYTES:
            raise MalformedEvent(
                f"an SSE event grew past {MAX_EVENT_BYTES >> 20} MiB without ending "
                f"(the cap on one event); {self._base - start} bytes so far"
            )

    def _line(self, line: bytes, offset: int, events: list[SseEvent]) -> None:
        if not line:
            if self._data is not None and self._start is not None:
                events.append(SseEvent(self._start, b"\n".join(self._data)))
            self._data = None
            self._start = None
            return
        if offset == 0 and line[:3] == _BOM:  # a byte order mark before the stream
            line = line[3:]
            if not line:
                return
        if self._start is None:
            self._start = offset
        if line[0] == 0x3A:  # ":" comment (keep-alive ping)
            return
        name, _, value = line.partition(b":")
        if name == b"data":
            if value[:1] == b" ":
                value = value[1:]
            if self._data is None:
                self._data = []
            self._data.append(value)
