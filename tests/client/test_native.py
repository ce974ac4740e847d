"""The native client against raw scripted servers on 127.0.0.1, on uvloop (conftest.py).

Each server writes exact bytes, so every HTTP/1.1 case the native protocol must handle is
pinned down: content-length, chunked and connection-delimited bodies, chunk headers split
anywhere, interim 1xx heads, invalid HTTP, connections closed before, during and after a
response, the connection limit, keep-alive reuse, and TLS. The cases both clients share
(test_transport.py) run through this client too.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from time import perf_counter_ns

import pytest
from aiohttp import web

from loadgen.client.native.client import NativeStreams, encode_headers
from loadgen.client.native.pool import parse_target
from loadgen.client.transport import Transport
from loadgen.records import ArrivalStamps, ErrorKind, RequestRecord
from loadgen.workload.plan import RequestSpec
from tests.support.tls_certs import make_certificate, server_context

Script = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]
REQUEST = RequestSpec(index=1, input_len=5, max_tokens=8, body=b'{"stream":true}')
SSE_HEAD = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
CHUNKED = SSE_HEAD + b"Transfer-Encoding: chunked\r\n\r\n"


def event(tokens: int, done: int) -> bytes:
    ids = ",".join(["7"] * tokens)
    return (
        b'data: {"choices":[{"index":0,"text":"x","token_ids":[%s]}],'
        b'"usage":{"prompt_tokens":5,"completion_tokens":%d}}\n\n' % (ids.encode(), done)
    )


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


BODY = event(1, 1) + event(2, 3) + b"data: [DONE]\n\n"


async def read_request(reader: asyncio.StreamReader) -> bytes:
    head = await reader.readuntil(b"\r\n\r\n")
    length = int(head.lower().split(b"content-length: ")[1].split(b"\r\n")[0])
    await reader.readexactly(length)
    return head


class Server:
    """Runs `script` for every request on every connection it accepts."""

    def __init__(self, script: Script) -> None:
        self.script = script
        self.connections = 0
        self.requests: list[bytes] = []
        self.writers: list[asyncio.StreamWriter] = []

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        self.writers.append(writer)
        try:
            with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
                while not writer.is_closing():
                    self.requests.append(await read_request(reader))
                    await self.script(reader, writer)
        finally:  # also when cancelled at the test's end: no transport left open
            writer.close()


@contextlib.asynccontextmanager
async def serve(script: Script) -> AsyncIterator[tuple[str, Server]]:
    server = Server(script)
    listener = await asyncio.start_server(server.handle, "127.0.0.1", 0)
    port = listener.sockets[0].getsockname()[1]
    async with listener:
        try:
            yield f"http://127.0.0.1:{port}/v1/completions", server
        finally:
            # the listener's close leaves its accepted connections open (3.11): close them
            for writer in server.writers:
                writer.close()
            listener.close()


async def send(
    streams: NativeStreams, url: str, rid: str = "r", limit_s: float | None = 5.0
) -> RequestRecord:
    transport = Transport(streams, url, request_timeout_s=limit_s)
    return await transport.send(
        REQUEST, x_request_id=rid, conc=1, scheduled_ns=0, on_record=lambda _r: None
    )


@contextlib.asynccontextmanager
async def native(max_connections: int = 2, **kwargs: object) -> AsyncIterator[NativeStreams]:
    streams = NativeStreams(max_connections=max_connections, **kwargs)  # type: ignore[arg-type]
    try:
        yield streams
    finally:
        await streams.close()


async def test_request_bytes_and_keep_alive_reuse() -> None:
    async def script(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(CHUNKED + chunk(BODY) + b"0\r\n\r\n")

    async with (
        serve(script) as (url, server),
        native(headers={"Authorization": "Bearer k"}) as streams,
    ):
        first = await send(streams, url, "a")
        second = await send(streams, url, "b")
    assert first.ok and first.chunk_tokens == (1, 2) and first.completion_tokens == 3
    assert first.connect_ns > 0 and second.ok and second.connect_ns == 0
    assert server.connections == 1  # kept alive
    head = server.requests[0].decode()
    assert head.startswith("POST /v1/completions HTTP/1.1\r\n")
    for line in (
        "Host: 127.0.0.1:",
        "X-Request-Id: a",
        "Content-Type: application/json",
        "Accept-Encoding: identity",
        "Authorization: Bearer k",
        f"Content-Length: {len(REQUEST.body)}",
    ):
        assert f"\r\n{line}" in head, line


async def test_content_length_body() -> None:
    async def script(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(SSE_HEAD + b"Content-Length: %d\r\n\r\n" % len(BODY) + BODY)

    async with serve(script) as (url, server), native() as streams:
        records = [await send(streams, url), await send(streams, url)]
    assert all(r.ok and r.chunk_tokens == (1, 2) for r in records)
    assert server.connections == 1


async def test_body_delimited_by_connection_close() -> None:
    async def script(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(SSE_HEAD + b"Connection: close\r\n\r\n" + event(1, 1))
        await asyncio.sleep(0.02)
        writer.write(b"data: [DONE]\n\n")
        writer.close()

    async with serve(script) as (url, server), native() as streams:
        first = await send(streams, url)
        second = await send(streams, url)
    assert first.ok and first.chunk_tokens == (1,) and second.ok
    assert second.connect_ns > 0 and server.connections == 2  # not reused


async def test_chunk_headers_and_events_split_anywhere() -> None:
    """Reads cut inside chunk-size lines, CRLFs and events; two events in one chunk."""
    wire = (
        CHUNKED
        + chunk(event(1, 1))
        + chunk(event(2, 3) + event(1, 4))
        + chunk(b"data: [DONE]\n\n")
        + b"0\r\n\r\n"
    )
    cuts = [len(CHUNKED) + 2, len(CHUNKED) + 40, len(wire) - 30, len(wire) - 3]
    parts = [wire[a:b] for a, b in zip([0, *cuts], [*cuts, len(wire)], strict=True)]
    written: list[int] = []

    async def script(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for part in parts:
            written.append(perf_counter_ns())
            writer.write(part)
            await writer.drain()
            await asyncio.sleep(0.02)

    async with serve(script) as (url, _), native() as streams:
        record = await send(streams, url)
    assert record.ok and record.chunk_tokens == (1, 2, 1)
    # The first event began in the second write; the next two in the third.
    assert written[1] < record.chunk_ns[0] < written[2]
    assert written[2] < record.chunk_ns[1] == record.chunk_ns[2] < written[3]


async def test_interim_100_continue_head_is_skipped() -> None:
    async def script(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(b"HTTP/1.1 100 Continue\r\n\r\n" + CHUNKED + chunk(BODY) + b"0\r\n\r\n")

    async with serve(script) as (url, _), native() as streams:
        record = await send(streams, url)
    assert record.ok and record.status == 200 and record.chunk_tokens == (1, 2)


@pytest.mark.parametrize(
    ("wire", "kind", "kept"),
    [
        (b"SSH-2.0-OpenSSH_9.6\r\n\r\n", ErrorKind.MALFORMED, ()),  # not HTTP
        (CHUNKED + chunk(event(1, 1)) + b"zz\r\n", ErrorKind.MALFORMED, (1,)),  # bad chunk size
        (CHUNKED + chunk(event(1, 1)) + b"CLOSE", ErrorKind.DISCONNECT, (1,)),  # cut mid-body
        (b"CLOSE", ErrorKind.DISCONNECT, ()),  # closed before any response
        (CHUNKED + chunk(event(1, 1)) + b"0\r\n\r\n", ErrorKind.DISCONNECT, (1,)),  # no [DONE]
        (CHUNKED + chunk(b"data: {nope\n\n") + b"0\r\n\r\n", ErrorKind.MALFORMED, ()),
        (
            b"HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\n"
            b'Content-Length: 16\r\n\r\n{"error":"busy"}',
            ErrorKind.HTTP,
            (),
        ),
        # an error whose body never ends: its first bytes are the record's detail
        (
            b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 999\r\n\r\nbusy",
            ErrorKind.HTTP,
            (),
        ),
    ],
)
async def test_failures_become_error_kinds(
    wire: bytes, kind: ErrorKind, kept: tuple[int, ...]
) -> None:
    async def script(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        data, close, _ = wire.partition(b"CLOSE")
        writer.write(data)
        if close:
            await writer.drain()
            writer.transport.abort()

    async with serve(script) as (url, _), native() as streams:
        record = await send(streams, url)
        again = await send(streams, url)  # the client is still usable afterwards
    assert record.error is kind and record.error_detail, record
    assert record.chunk_tokens == kept  # what arrived before the failure is kept
    assert again.error is kind
    if kind is ErrorKind.HTTP:
        assert record.status in (500, 503) and "busy" in record.error_detail


async def test_server_closing_an_idle_connection_is_not_an_error() -> None:
    closed = asyncio.Event()

    async def script(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        writer.write(CHUNKED + chunk(BODY) + b"0\r\n\r\n")
        await asyncio.sleep(0.05)  # a keep-alive timeout, as uvicorn's 5 s
        writer.close()
        await writer.wait_closed()
        closed.set()

    async with serve(script) as (url, server), native() as streams:
        first = await send(streams, url)
        # The close must have been sent before the client's next send: a fixed sleep let
        # a stalled loop (a busy CI machine) run the server's close and the client's send
        # in one iteration, before the client's socket could read the close. After the
        # close, the sleep's iteration polls the socket before it runs any timer.
        await closed.wait()
        await asyncio.sleep(0.05)
        second = await send(streams, url)
    assert first.ok and second.ok and second.connect_ns > 0
    assert server.connections == 2


async def test_connection_limit_queues_requests() -> None:
    async def script(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.05)
        writer.write(CHUNKED + chunk(BODY) + b"0\r\n\r\n")

    async with serve(script) as (url, server), native(max_connections=1) as streams:
        records = await asyncio.gather(*(send(streams, url, f"r{i}") for i in range(3)))
    assert all(r.ok for r in records) and server.connections == 1
    # A queued request's clock starts at its write, after its wait for the connection.
    starts = sorted(r.start_ns for r in records)
    ends = sorted(r.end_ns for r in records)
    assert starts[1] >= ends[0] and starts[2] >= ends[1]


async def test_a_cancelled_waiter_does_not_keep_its_place() -> None:
    async def script(_r: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.sleep(0.1)
        writer.write(CHUNKED + chunk(BODY) + b"0\r\n\r\n")

    async with serve(script) as (url, _), native(max_connections=1) as streams:
        first = asyncio.create_task(send(streams, url, "a"))
        await asyncio.sleep(0.02)
        queued = asyncio.create_task(send(streams, url, "b"))
        await asyncio.sleep(0.02)
        queued.cancel()
        with pytest.raises(asyncio.CancelledError):
            await queued
        last = await send(streams, url, "c")  # gets the connection once "a" is done
    assert (await first).ok and last.ok


async def test_connect_errors() -> None:
    async with native() as streams:
        refused = await send(streams, "http://127.0.0.1:9/v1/completions")
    assert refused.error is ErrorKind.CONNECT and refused.status is None


def test_targets_and_headers() -> None:
    target = parse_target("https://example.test/v1/completions?x=1")
    assert target.origin == ("example.test", 443, True)
    assert target.path == b"/v1/completions?x=1" and target.host_header == b"example.test"
    assert parse_target("http://[::1]:8000/v1").host_header == b"[::1]:8000"
    with pytest.raises(ValueError, match="http"):
        parse_target("ftp://x/")
    with pytest.raises(ValueError, match="CR, LF"):
        encode_headers({"X-A": "b\r\nX-B: c"})


# -- TLS ---------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def certificate(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return make_certificate(tmp_path_factory.mktemp("tls"))


@contextlib.asynccontextmanager
async def tls_server(certificate: tuple[Path, Path]) -> AsyncIterator[str]:
    async def completions(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for part in (event(1, 1), event(2, 3), b"data: [DONE]\n\n"):
            await response.write(part)
        await response.write_eof()
        return response

    context = server_context(certificate)
    app = web.Application()
    app.router.add_post("/v1/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=context)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    try:
        yield f"https://127.0.0.1:{port}/v1/completions"
    finally:
        await runner.cleanup()


async def test_https_with_a_trusted_certificate(
    certificate: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("SSL_CERT_FILE", str(certificate[0]))  # how a user trusts a CA
    async with tls_server(certificate) as url, native() as streams:
        first = await send(streams, url)
        second = await send(streams, url)
    assert first.ok and first.chunk_tokens == (1, 2) and first.connect_ns > 0
    assert second.ok and second.connect_ns == 0  # TLS connections are kept alive too
    assert first.arrival_stamps is second.arrival_stamps is ArrivalStamps.READ


async def test_https_with_an_untrusted_certificate_is_a_connect_error(
    certificate: tuple[Path, Path],
) -> None:
    async with tls_server(certificate) as url, native() as streams:
        record = await send(streams, url)
    assert record.error is ErrorKind.CONNECT and "certificate" in record.error_detail.lower()
