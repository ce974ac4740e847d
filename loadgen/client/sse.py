"""Incremental Server-Sent-Events framing with arrival stamps.

The transport stamps every socket read (perf_counter_ns) before any parsing and logs,
per response body, how many body bytes had arrived by each stamp (`ArrivalLog`). The
framer here runs later, off the timing path: it splits the body into events and reports
each event's first byte offset, which the log turns back into the arrival time of the
read that carried that byte.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import NamedTuple

_EOL = re.compile(rb"\r\n|\r|\n")


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

    __slots__ = ("_base", "_buf", "_data", "_start")

    def __init__(self) -> None:
        self._buf = bytearray()
        self._base = 0  # body offset of _buf[0]
        self._data: list[bytes] | None = None  # data lines of the event being read
        self._start: int | None = None  # offset of the event's first line

    def feed(self, chunk: bytes) -> list[SseEvent]:
        if self._buf or self._start is not None or b"\r" in chunk:
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

    def _block(self, block: bytes, offset: int, events: list[SseEvent]) -> None:
        """One blank-line-terminated block without CR, line by line."""
        for line in block.split(b"\n"):
            self._line(line, offset, events)
            offset += len(line) + 1
        self._line(b"", offset, events)

    def _feed_lines(self, chunk: bytes) -> list[SseEvent]:
        buf = self._buf
        buf += chunk
        events: list[SseEvent] = []
        pos = 0
        size = len(buf)
        while True:
            match = _EOL.search(buf, pos)
            if match is None:
                break
            if match.end() == size and buf[match.start()] == 0x0D:
                break  # a trailing CR may be the first half of CRLF
            line = bytes(buf[pos : match.start()])
            line_offset = self._base + pos
            pos = match.end()
            self._line(line, line_offset, events)
        del buf[:pos]
        self._base += pos
        return events

    def _line(self, line: bytes, offset: int, events: list[SseEvent]) -> None:
        if not line:
            if self._data is not None and self._start is not None:
                events.append(SseEvent(self._start, b"\n".join(self._data)))
            self._data = None
            self._start = None
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

    @property
    def pending(self) -> bool:
        """Bytes of an unfinished event are buffered (the stream was cut mid-event)."""
        return bool(self._buf) or self._data is not None
