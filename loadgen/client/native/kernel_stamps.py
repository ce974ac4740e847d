"""Arrival stamps taken by the kernel: a plain-TCP transport that reads with recvmsg.

A stamp taken in the client's read callback includes the time the bytes waited in the
socket for the event loop to come round: under a burst of hundreds of streams that is
the client's own cost showing up in every TTFT and ITL. Linux can stamp each packet as
it is received (SO_TIMESTAMPING, software receive stamps) and hand the stamp of the
newest packet a read returned beside the data: the moment the last byte of that read
arrived on this machine, whatever the client was doing then. That stamp is what this
transport gives the protocol (`StreamProtocol.received`).

The kernel stamps in CLOCK_REALTIME; every duration loadgen computes is on
perf_counter_ns (CLOCK_MONOTONIC), so each stamp is moved onto it by the two clocks'
offset (`ClockBridge`). A stamp that cannot be right -- later than the read, earlier
than the connection's previous stamp or than its request's write (a wall-clock step in
between) -- or a read with no stamp is stamped at the read instead, as without this
transport, and counted (`fallbacks`): a request with such a read is recorded as stamped
at the read (`ArrivalStamps.READ`), never as the kernel's.

What a kernel stamp cannot do is tell apart two events that one read returned: both
carry the newer one's arrival. So reads still have to be prompt, and the parsing stays
off the read path (ingest.py): a read loop that parsed as it read took ~8 ms to go round
512 sockets, and 3-9% of chunks came in pairs.

Only for http://: a TLS record is decrypted in user space, so https keeps uvloop's
transport and read stamps. Nothing here parses bytes; the protocol does, later.
"""

from __future__ import annotations

import asyncio
import socket
import struct
import sys
from collections.abc import Callable
from time import perf_counter_ns, time_ns
from typing import Any, Protocol

# <linux/net_tstamp.h>: generate software receive stamps, and report them.
_SOF_TIMESTAMPING_RX_SOFTWARE = 1 << 3
_SOF_TIMESTAMPING_SOFTWARE = 1 << 4
_SO_TIMESTAMPING = 37  # <asm-generic/socket.h>; also its SCM_ control-message type
_READ_SIZE = 1 << 16
_ANCILLARY_SIZE = socket.CMSG_SPACE(3 * 16) if hasattr(socket, "CMSG_SPACE") else 0
# ts[0] of struct scm_timestamping: the software stamp (ts[1..2] are hardware stamps)
_unpack_timespec = struct.Struct("qq").unpack_from


class StampedProtocol(Protocol):
    """The protocol side: `StreamProtocol`."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None: ...

    def received(self, data: bytes, stamp: int, read_ns: int) -> None: ...

    def arrived_before_write(self, data: bytes, stamp: int, written_ns: int) -> None: ...

    def connection_lost(self, exc: Exception | None) -> None: ...


def supported() -> bool:
    """Whether this platform can stamp receives in the kernel (Linux)."""
    return sys.platform.startswith("linux") and _ANCILLARY_SIZE > 0


def enable(sock: socket.socket) -> bool:
    """Ask the kernel to stamp what `sock` receives; False where it will not."""
    if not supported():
        return False
    try:
        sock.setsockopt(
            socket.SOL_SOCKET,
            _SO_TIMESTAMPING,
            _SOF_TIMESTAMPING_RX_SOFTWARE | _SOF_TIMESTAMPING_SOFTWARE,
        )
    except OSError:
        return False
    return True


class ClockBridge:
    """CLOCK_REALTIME readings moved onto perf_counter_ns's clock (CLOCK_MONOTONIC).

    The two clocks' offset moves only as NTP slews the wall clock (at most 500 ppm) or
    steps it. It is read every REFRESH_NS as the tightest of three (monotonic, realtime,
    monotonic) readings, so a moved stamp is off by at most half that reading's width
    (tens of ns) plus the slew since (under 5 us at the 500 ppm limit; typical slews are
    a hundred times smaller). A step is seen within REFRESH_NS; a stamp it made
    impossible is refused by the transport.
    """

    REFRESH_NS = 10_000_000

    __slots__ = ("_monotonic", "_realtime", "next_ns", "offset_ns")

    def __init__(
        self, monotonic: Callable[[], int] | None = None, realtime: Callable[[], int] | None = None
    ) -> None:
        self._monotonic = monotonic or perf_counter_ns
        self._realtime = realtime or time_ns
        self.offset_ns = 0  # realtime - monotonic
        self.next_ns = 0  # refresh at the first read at or after this (monotonic)

    def refresh(self, now: int) -> None:
        monotonic, realtime = self._monotonic, self._realtime
        best = None
        for _ in range(3):
            before = monotonic()
            wall = realtime()
            after = monotonic()
            if best is None or after - before < best[0]:
                best = (after - before, wall - (before + after) // 2)
        assert best is not None
        self.offset_ns = best[1]
        self.next_ns = now + self.REFRESH_NS


class KernelStampedTransport(asyncio.Transport):
    """A connected, non-blocking TCP socket driven by the loop's reader/writer callbacks."""

    def __init__(
        self,
        loop: asyncio.AbstractEventLoop,
        sock: socket.socket,
        protocol: StampedProtocol,
        bridge: ClockBridge,
    ) -> None:
        super().__init__()
        self._bridge = bridge
        self._loop = loop
        self._sock = sock
        self._fd = sock.fileno()
        self._stream = protocol
        self._recvmsg: Callable[
            [int, int], tuple[bytes, list[tuple[int, int, bytes]], int, Any]
        ] = sock.recvmsg
        self._pending = bytearray()  # written bytes the socket has not taken yet
        self._closing = False
        opened = perf_counter_ns()  # no byte of this connection can be stamped earlier
        self.floor_ns = opened  # no stamp may be earlier: the newest stamp, or the last write
        self.written_ns = opened  # the last write (a request)
        # the newest stamp before that write: a stamp earlier still is an impossible one
        # (a clock that disagrees), never bytes that waited for this request
        self._stamped_ns = opened
        self.fallbacks = 0  # reads stamped at the read: no kernel stamp, or an impossible one
        protocol.connection_made(self)
        loop.add_reader(self._fd, self._on_readable)

    # -- reading ------------------------------------------------------------------------

    def _on_readable(self) -> None:
        try:
            data, ancillary, _, _ = self._recvmsg(_READ_SIZE, _ANCILLARY_SIZE)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        now = perf_counter_ns()
        if not data:  # EOF: the server closed its side
            self._lose(None)
            return
        stamp = -1
        if ancillary:  # one control message: the only kind this socket asked for
            _, kind, raw = ancillary[0]
            if kind == _SO_TIMESTAMPING and len(raw) >= 16:
                seconds: int
                nanoseconds: int
                seconds, nanoseconds = _unpack_timespec(raw)
                bridge = self._bridge
                if now >= bridge.next_ns:
                    bridge.refresh(now)
                stamp = seconds * 1_000_000_000 + nanoseconds - bridge.offset_ns
        if not self.floor_ns <= stamp <= now:
            if stamp >= 0 and self._before_write(stamp, now):
                self._stream.arrived_before_write(data, stamp, self.written_ns)
                return
            stamp = now
            self.fallbacks += 1
        self.floor_ns = stamp
        try:
            self._stream.received(data, stamp, now)
        except Exception as exc:  # as asyncio's transports: a protocol that failed on
            self._lose(exc)  # this connection's bytes does not get the next ones
            raise

    def _before_write(self, stamp: int, now: int) -> bool:
        """Whether a stamp under the floor says the bytes came before the last write
        (and after the previous read): bytes no reply to that write can be. The clocks'
        offset is re-read first, so a wall-clock step is not taken for that."""
        bridge = self._bridge
        moved = bridge.offset_ns
        bridge.refresh(now)
        stamp += moved - bridge.offset_ns
        return self._stamped_ns <= stamp < self.written_ns

    # -- writing ------------------------------------------------------------------------

    def write(self, data: bytes | bytearray | memoryview) -> None:
        if self._closing:
            return
        now = perf_counter_ns()
        if now > self.floor_ns:  # no reply precedes its request
            self._stamped_ns, self.floor_ns = self.floor_ns, now
        self.written_ns = now
        if self._pending:
            self._pending += data
            return
        try:
            sent = self._sock.send(data)
        except (BlockingIOError, InterruptedError):
            sent = 0
        except OSError as exc:
            self._lose(exc)
            return
        if sent < len(data):
            self._pending += memoryview(data)[sent:]
            self._loop.add_writer(self._fd, self._on_writable)

    def _on_writable(self) -> None:
        try:
            sent = self._sock.send(self._pending)
        except (BlockingIOError, InterruptedError):
            return
        except OSError as exc:
            self._lose(exc)
            return
        del self._pending[:sent]
        if not self._pending:
            self._loop.remove_writer(self._fd)

    def get_write_buffer_size(self) -> int:
        return len(self._pending)

    # -- closing ------------------------------------------------------------------------

    def is_closing(self) -> bool:
        return self._closing

    def close(self) -> None:
        self._lose(None)

    def abort(self) -> None:
        self._lose(None)

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        if name == "socket":
            return self._sock
        if name == "peername":
            try:
                return self._sock.getpeername()
            except OSError:
                return default
        return default

    def _lose(self, exc: Exception | None) -> None:
        """Stop reading and writing and close the socket now; the protocol hears it on the
        loop's next turn (as from asyncio's transports: never inside its own call)."""
        if self._closing:
            return
        self._closing = True
        self._loop.remove_reader(self._fd)
        if self._pending:
            self._pending.clear()
            self._loop.remove_writer(self._fd)
        self._sock.close()
        self._loop.call_soon(self._stream.connection_lost, exc)


async def open_connection(
    loop: asyncio.AbstractEventLoop,
    host: str,
    port: int,
    protocol: StampedProtocol,
    bridge: ClockBridge,
) -> KernelStampedTransport:
    """Connect to host:port (each address in turn, as create_connection does), stamped."""
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
    if not infos:
        raise OSError(f"getaddrinfo({host!r}) returned no address")
    errors: list[OSError] = []
    for family, kind, proto, _, address in infos:
        sock = socket.socket(family, kind, proto)
        try:
            sock.setblocking(False)
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            enable(sock)  # if refused, every read is stamped at the read (and counted)
            await loop.sock_connect(sock, address)
        except OSError as exc:
            sock.close()
            errors.append(exc)
            continue
        except BaseException:
            sock.close()
            raise
        return KernelStampedTransport(loop, sock, protocol, bridge)
    if len(errors) == 1:
        raise errors[0]
    raise OSError(
        f"could not connect to {host}:{port}: " + "; ".join(str(error) for error in errors)
    )
