"""What the shards and shard 0's hub say to each other: typed messages (frozen msgspec
Structs, tagged), each one frame of a 4-byte big-endian length and its msgpack body.

The first frame on a connection is always the shard's `Hello`, which proves it holds
the shared secret (an HMAC of a fresh nonce); the hub reads at most HELLO_MAX bytes
before that proof and answers nothing to a connection without it.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import secrets
import struct
from typing import Any

import msgspec

HELLO_MAX = 1 << 20  # a Hello holds the settings: a few kB
FRAME_MAX = 1 << 30  # a result file travels in CHUNK pieces: far less
CHUNK = 4 << 20
_LENGTH = struct.Struct(">I")
_PROOF_CONTEXT = b"loadgen-coordinator/1\0"


class Hello(msgspec.Struct, frozen=True, tag="hello"):
    version: str
    index: int
    count: int
    settings: dict[str, Any]  # run.json's flat settings (results_dir and friends differ)
    nonce: bytes
    proof: bytes


class Welcome(msgspec.Struct, frozen=True, tag="welcome"):
    pass


class Refused(msgspec.Struct, frozen=True, tag="refused"):
    reason: str


class AllJoined(msgspec.Struct, frozen=True, tag="joined"):
    run_id: str  # shard 0's: every shard's run (and a session run's cache-bust key)


class Ready(msgspec.Struct, frozen=True, tag="ready"):
    conc: int


class Go(msgspec.Struct, frozen=True, tag="go"):
    conc: int


class Abort(msgspec.Struct, frozen=True, tag="abort"):
    """Shard -> hub: this shard stops the run (its own line)."""

    line: str


class Stop(msgspec.Struct, frozen=True, tag="stop"):
    """Hub -> shards: shard `index` stopped the run."""

    index: int
    line: str


class Beat(msgspec.Struct, frozen=True, tag="beat"):
    pass


class ResultChunk(msgspec.Struct, frozen=True, tag="chunk"):
    name: str  # relative to the shard's results directory
    data: bytes
    first: bool  # the file starts here (else: appended)


class HandedIn(msgspec.Struct, frozen=True, tag="handed_in"):
    pass


class Received(msgspec.Struct, frozen=True, tag="received"):
    pass


Message = (
    Hello
    | Welcome
    | Refused
    | AllJoined
    | Ready
    | Go
    | Abort
    | Stop
    | Beat
    | ResultChunk
    | HandedIn
    | Received
)

_encoder = msgspec.msgpack.Encoder()
_decoder: msgspec.msgpack.Decoder[Message] = msgspec.msgpack.Decoder(Message)


class FrameError(Exception):
    """Not a frame of this protocol (too long, undecodable)."""


def proof(token: str, nonce: bytes) -> bytes:
    return hmac.new(token.encode(), _PROOF_CONTEXT + nonce, hashlib.sha256).digest()


def hello(token: str, version: str, index: int, count: int, settings: dict[str, Any]) -> Hello:
    nonce = secrets.token_bytes(16)
    return Hello(version, index, count, settings, nonce, proof(token, nonce))


def proven(message: Hello, token: str) -> bool:
    return hmac.compare_digest(message.proof, proof(token, message.nonce))


async def send(writer: asyncio.StreamWriter, message: Message) -> None:
    # uvloop raises RuntimeError (not an OSError) on a write to a closed transport:
    # a peer that is gone is a ConnectionError to every sender
    if writer.is_closing():
        raise ConnectionResetError("the connection is closed")
    body = _encoder.encode(message)
    writer.write(_LENGTH.pack(len(body)) + body)
    await writer.drain()


async def receive(
    reader: asyncio.StreamReader, limit: int = FRAME_MAX, *, reset_is_end: bool = True
) -> Message | None:
    """The next message; None at the end of the stream (the peer closed or died). With
    `reset_is_end` False a reset connection raises ConnectionResetError instead: the
    peer never was there (a refused connect seen through a proxy), not a closed door."""
    try:
        head = await reader.readexactly(_LENGTH.size)
        (length,) = _LENGTH.unpack(head)
        if length > limit:
            raise FrameError(f"a frame of {length} bytes (at most {limit})")
        body = await reader.readexactly(length)
    except ConnectionResetError:
        if not reset_is_end:
            raise
        return None
    except (asyncio.IncompleteReadError, ConnectionError):
        return None
    try:
        return _decoder.decode(body)
    except msgspec.DecodeError as exc:
        raise FrameError(str(exc)) from None
