"""The native streaming client: requests written as one buffer, responses read by StreamProtocol.

What a measured request costs here, in order: take a kept-alive connection (or open
one: timed as connect), format the request head (the run's fixed headers are encoded
once), stamp `sent_ns`, one `transport.write`. Then the protocol stamps and appends each
read, and the ingest parses; this coroutine sleeps until the head arrives and again
until the body has ended, whatever the number of chunks.
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Mapping
from time import perf_counter_ns

from loadgen.client.events import TokenCounter
from loadgen.client.ingest import Exchange, Ingest
from loadgen.client.native.body import EventStream
from loadgen.client.native.kernel_stamps import KernelStampedTransport
from loadgen.client.native.pool import ConnectionPool, Target, parse_target
from loadgen.client.native.protocol import Response
from loadgen.client.stream_client import RequestClock, is_event_stream, record_rejection
from loadgen.records import ArrivalStamps

# What the aiohttp session sends too: no compression, so the bytes stamped are the events.
_FIXED_HEADERS = {"Accept": "*/*", "Accept-Encoding": "identity"}


def encode_headers(headers: Mapping[str, str]) -> bytes:
    """`Name: value\\r\\n` lines; a CR or LF in a header would smuggle a second request."""
    lines = []
    for name, value in headers.items():
        if any(c in name + value for c in "\r\n\0") or not name or ":" in name:
            raise ValueError(
                f"header {name!r}: names and values cannot hold CR, LF or NUL and names no colon"
            )
        lines.append(f"{name}: {value}\r\n")
    return "".join(lines).encode("latin-1")


class NativeStreams:
    """The `StreamClient` of the measured requests: one pool of keep-alive connections."""

    def __init__(
        self,
        *,
        max_connections: int,
        headers: Mapping[str, str] | None = None,
        ssl_context: ssl.SSLContext | None = None,
        kernel_stamped: bool = True,
    ) -> None:
        self.pool = ConnectionPool(max_connections, ssl_context, kernel_stamped)
        self._fixed = encode_headers({**_FIXED_HEADERS, **(headers or {})})
        self._targets: dict[str, Target] = {}

    async def exchange(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        clock: RequestClock,
        state: Exchange,
        counter: TokenCounter,
        ingest: Ingest,
    ) -> None:
        target = self._targets.get(url)
        if target is None:
            target = self._targets[url] = parse_target(url)
        connection = await self.pool.acquire(target.origin, clock)
        if not clock.connect_ns:  # kept alive: its idle period may clear what it served
            connection.reused(clock.acquired_ns)
        state.previous_id = connection.last_id
        transport = connection.transport
        kernel = transport if isinstance(transport, KernelStampedTransport) else None
        fallbacks = kernel.fallbacks if kernel is not None else 0
        response = connection.begin(asyncio.get_running_loop(), ingest)
        try:
            assert transport is not None
            clock.activity = response  # every read, head included, resets the idle deadline
            request = b"".join(
                (
                    b"POST ",
                    target.path,
                    b" HTTP/1.1\r\nHost: ",
                    target.host_header,
                    b"\r\n",
                    self._fixed,
                    encode_headers(headers),
                    b"Content-Length: %d\r\n\r\n" % len(body),
                    body,
                )
            )
            clock.sent_ns = perf_counter_ns()
            transport.write(request)
            await response.head
            if not response.status:  # no head: the connection broke or spoke no HTTP
                assert response.error is not None
                raise response.error
            state.status = response.status
            if not is_event_stream(response.status, response.content_type):
                record_rejection(state, response.status, await _first_bytes(response))
                return
            await _follow(response, state, counter)
        finally:
            if kernel is not None and kernel.fallbacks == fallbacks:
                state.arrival_stamps = ArrivalStamps.KERNEL
            self.pool.release(target.origin, connection)
            state.stray_bytes = response.stray  # release() may have found some, too
            if connection.reusable:  # kept: bytes it gets from now on may taint this one
                now = perf_counter_ns()
                connection.served(state, now - clock.sent_ns, now)

    def drop_idle(self) -> int:
        return self.pool.drop_idle()

    async def close(self) -> None:
        await self.pool.close()


async def _first_bytes(response: Response) -> bytes:
    """What has arrived of a body that is not an event stream, once anything has (as
    aiohttp's read(n)): an error body that never ends must not turn into a timeout."""
    if not response.pieces and not response.ended.done():
        arrived = asyncio.get_running_loop().create_future()

        def wake(_: object = None) -> None:
            if not arrived.done():
                arrived.set_result(None)

        response.listener = wake
        response.ended.add_done_callback(wake)
        try:
            await arrived
        finally:
            response.listener = None
    return response.read_nowait()


async def _follow(response: Response, state: Exchange, counter: TokenCounter) -> None:
    """Let the ingest frame and decode the body as it parses it; sleep until it has ended."""
    stream = EventStream(response, state, counter)
    response.sink = stream.feed
    stream.drain()  # body bytes parsed with the head
    try:
        await response.ended  # end of body, or the connection broke
    finally:
        response.parse()  # a cancelled or timed-out request keeps what had arrived
        response.sink = None
    # A broken connection is the cause unless the events already ended ([DONE]) or one
    # was malformed first; finish() records a body that ended cleanly without [DONE].
    if response.error is not None and stream.error is None and not state.done:
        raise response.error
    stream.finish()
