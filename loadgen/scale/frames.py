"""Messages between loadgen and its worker processes: length-prefixed frames on a socketpair.

A frame is a 4-byte big-endian payload length, one byte of `Kind`, then the payload:
orjson for every message (a record is `RequestRecord.to_json()`, exact integers), except
the worker's one-time configuration, which is pickled (a RunSpec and the server's
preflight facts, between two processes of the same program over a private socketpair).
Writes go through asyncio's buffered transport, so a worker never blocks its event loop
on a slow reader.
"""

from __future__ import annotations

import asyncio
import struct
from enum import IntEnum
from typing import Any

import orjson

HEADER = struct.Struct(">IB")
MAX_FRAME = 1 << 30  # a record of a 100k-token answer is ~2 MB; anything near this is a bug


class Kind(IntEnum):
    # parent -> worker
    CONFIG = 1  # pickled WorkerConfig
    POINT = 2  # {"conc"}: build your share of the point and warm up
    GO = 3  # {"at_ns"}: start the measured phase at this perf_counter_ns
    STOP = 4  # cancel what is running, report what was measured
    EXIT = 5
    # worker -> parent
    READY = 10  # {"pid"}
    WARM = 11  # {"warmup_failed"}
    STARTED = 12  # {"n"}: requests sent since the last STARTED
    LAG = 13  # {"ns": [...]}: loop-lag samples since the last LAG
    RECORD = 14  # one RequestRecord
    DONE = 15  # {"health": {...}, "warmup_failed"}: the point is over for this worker
    FAILED = 16  # {"error"}: the worker cannot go on (it exits next)
    # {"tainted": [[request_id, start_ns, why], ...]}: records already sent whose
    # connection later showed them out of step (its transport's take_tainted)
    TAINTED = 17


class FrameError(ValueError):
    """The peer sent something that is not a frame of this protocol."""


def frame(kind: Kind, payload: bytes) -> bytes:
    return HEADER.pack(len(payload), kind) + payload


def message(kind: Kind, body: dict[str, Any] | None = None) -> bytes:
    return frame(kind, orjson.dumps(body or {}))


async def read_frame(reader: asyncio.StreamReader) -> tuple[Kind, bytes] | None:
    """The next frame, or None when the peer closed the connection (or died)."""
    try:
        header = await reader.readexactly(HEADER.size)
        length, kind = HEADER.unpack(header)
        if length > MAX_FRAME:
            raise FrameError(f"frame of {length} bytes")
        return Kind(kind), await reader.readexactly(length)
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    except ValueError as exc:  # Kind(kind) of an unknown byte
        raise FrameError(str(exc)) from None
