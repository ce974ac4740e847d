"""Keep-alive connections per origin, at most `max_connections` open at once.

The native client's counterpart of aiohttp's TCPConnector: idle connections are reused
most-recently-used first (the warmest socket), a connection that closed while idle is
dropped when it is next looked at, and a request that finds every connection busy waits
for one (queue time: its clock starts at its write). Opening a connection -- DNS, TCP
and, for https, the TLS handshake -- is timed into `RequestClock.connect_ns`.

Plain http:// connections are kernel-stamped where the platform can (kernel_stamps.py);
https:// ones use uvloop's TLS transport, stamped at the read.
"""

from __future__ import annotations

import asyncio
import ssl
from collections import deque
from time import perf_counter_ns
from typing import NamedTuple
from urllib.parse import urlsplit

from loadgen.client.native import kernel_stamps
from loadgen.client.native.protocol import StreamProtocol
from loadgen.client.stream_client import RequestClock


class Origin(NamedTuple):
    host: str
    port: int
    tls: bool


class Target(NamedTuple):
    origin: Origin
    path: bytes  # the request-target: path and query
    host_header: bytes


def parse_target(url: str) -> Target:
    """`http(s)://host[:port]/path?query` -> where to connect and what to ask for."""
    parts = urlsplit(url)
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{url!r}: need an http:// or https:// URL with a host")
    tls = parts.scheme == "https"
    port = parts.port or (443 if tls else 80)
    path = parts.path or "/"
    if parts.query:
        path += "?" + parts.query
    host = parts.hostname
    shown = f"[{host}]" if ":" in host else host
    host_header = shown if parts.port is None else f"{shown}:{port}"
    return Target(Origin(host, port, tls), path.encode("ascii"), host_header.encode("idna"))


class ConnectionPool:
    def __init__(
        self,
        max_connections: int,
        ssl_context: ssl.SSLContext | None = None,
        kernel_stamped: bool = True,
    ) -> None:
        self.max_connections = max_connections
        self._ssl_context = ssl_context
        self._kernel_stamped = kernel_stamped and kernel_stamps.supported()
        self._clocks = kernel_stamps.ClockBridge()
        self._idle: dict[Origin, list[StreamProtocol]] = {}
        self._open: set[StreamProtocol] = set()  # idle, busy and still connecting
        self._connecting = 0
        self._waiters: deque[asyncio.Future[None]] = deque()
        self._closed = False

    async def acquire(self, origin: Origin, clock: RequestClock) -> StreamProtocol:
        """A connection to `origin`, reused when one is idle; the caller must `release` it."""
        while True:
            idle = self._idle.get(origin)
            while idle:
                connection = idle.pop()
                if connection.reusable:
                    clock.acquired_ns = perf_counter_ns()
                    return connection
                self._forget(connection)
            if len(self._open) + self._connecting < self.max_connections or self._evict_idle():
                return await self._connect(origin, clock)
            waiter = asyncio.get_running_loop().create_future()
            self._waiters.append(waiter)
            try:
                await waiter
            except BaseException:
                if waiter.done() and not waiter.cancelled():
                    self._wake_one()  # woken, then cancelled: pass the free slot on
                elif waiter in self._waiters:
                    self._waiters.remove(waiter)
                raise

    def release(self, origin: Origin, connection: StreamProtocol) -> None:
        """Back to the idle list if its response ended cleanly, else closed."""
        connection.release()
        if connection.reusable and not self._closed:
            self._idle.setdefault(origin, []).append(connection)
        else:
            self._forget(connection)
        self._wake_one()

    def drop_idle(self) -> int:
        """Close every idle connection, so the next requests open new ones (a --trials
        trial starts on fresh connections); busy ones are left to finish. How many."""
        dropped = 0
        for idle in self._idle.values():
            while idle:
                connection = idle.pop()
                connection.abort()
                self._forget(connection)
                dropped += 1
        return dropped

    async def close(self) -> None:
        self._closed = True
        for connection in list(self._open):
            connection.abort()
        self._open.clear()
        self._idle.clear()

    async def _connect(self, origin: Origin, clock: RequestClock) -> StreamProtocol:
        loop = asyncio.get_running_loop()
        context = None
        if origin.tls:
            if self._ssl_context is None:
                self._ssl_context = ssl.create_default_context()  # honours SSL_CERT_FILE
            context = self._ssl_context
        self._connecting += 1
        clock.connect_begin = perf_counter_ns()
        try:
            if context is None and self._kernel_stamped:
                connection = StreamProtocol()
                await kernel_stamps.open_connection(
                    loop, origin.host, origin.port, connection, self._clocks
                )
            else:
                _, connection = await loop.create_connection(
                    StreamProtocol,
                    origin.host,
                    origin.port,
                    ssl=context,
                    server_hostname=origin.host if context is not None else None,
                )
        except BaseException:
            self._connecting -= 1
            self._wake_one()  # the slot this attempt held is free again
            raise
        self._connecting -= 1
        clock.acquired_ns = perf_counter_ns()
        clock.connect_ns = clock.acquired_ns - clock.connect_begin
        self._open.add(connection)
        return connection

    def _evict_idle(self) -> bool:
        """At the limit: close one idle connection (of any origin) to make room."""
        for idle in self._idle.values():
            if idle:
                connection = idle.pop(0)  # the least recently used
                connection.abort()
                self._forget(connection)
                return True
        return False

    def _forget(self, connection: StreamProtocol) -> None:
        self._open.discard(connection)

    def _wake_one(self) -> None:
        while self._waiters:
            waiter = self._waiters.popleft()
            if not waiter.done():
                waiter.set_result(None)
                return
