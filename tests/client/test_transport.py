"""The transport against a small real SSE server on 127.0.0.1 (port 0), through both clients.

The server here is deliberately minimal (scripted byte streams, not the simulator) so
each wire situation -- split events, missing [DONE], bad JSON, HTTP errors, stalls -- is
exact and fast. Every case runs through the native client and the aiohttp one
(`--http-client`); raw-socket wire cases of the native client are in test_native.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import subprocess
import sys
from collections.abc import AsyncIterator
from time import perf_counter_ns
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from loadgen.client.aiohttp_seam import StampingConnector, StampingResponseHandler
from loadgen.client.native.client import NativeStreams
from loadgen.client.stream_client import StreamClient
from loadgen.client.transport import READ_BUFSIZE, AiohttpStreams, Transport, open_session
from loadgen.records import ErrorKind, RequestRecord
from loadgen.workload.plan import RequestSpec


def chunk(ids: list[int], done: int) -> bytes:
    return (
        b'data: {"choices":[{"index":0,"text":"x","token_ids":%s}],'
        b'"usage":{"prompt_tokens":5,"completion_tokens":%d}}\n\n'
        % (str(ids).replace(" ", "").encode(), done)
    )


SCRIPTS: dict[str, list[bytes]] = {
    "ok": [
        chunk([1], 1),
        chunk([2, 3], 3),
        chunk([4, 5, 6], 6),
        b'data: {"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":6}}\n\n',
        b"data: [DONE]\n\n",
    ],
    "split": [
        chunk([1], 1)[:7],
        chunk([1], 1)[7:] + chunk([2], 2)[:30],
        chunk([2], 2)[30:] + b"data: [DO",
        b"NE]\n\n",
    ],
    "abort": [chunk([1], 1), chunk([2], 2)],
    "malformed": [chunk([1], 1), b"data: {nope\n\n", b"data: [DONE]\n\n"],
    "server_error": [
        chunk([1], 1),
        b'data: {"error":{"message":"oom","code":500}}\n\n',
        b"data: [DONE]\n\n",
    ],
    "stall": [chunk([1], 1), b"STALL", b"data: [DONE]\n\n"],
    # a 2 MB event (e.g. prompt_token_ids of a long prompt): no buffer or line limit
    "long": [chunk(list(range(300_000)), 300_000), b"data: [DONE]\n\n"],
}


SseServer = tuple[str, dict[str, list[int]]]


@pytest.fixture
async def sse_server() -> AsyncIterator[tuple[str, dict[str, list[int]]]]:
    sent: dict[str, list[int]] = {}  # x-request-id -> perf_counter_ns before each write

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        script = request.query.get("s", "ok")
        if script == "http500":
            return web.json_response({"error": {"message": "no"}}, status=500)
        if script == "json":  # a server that ignored stream: true
            return web.json_response({"choices": [{"text": "x"}]})
        stamps = sent.setdefault(request.headers["X-Request-Id"], [])
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for part in SCRIPTS[script]:
            await asyncio.sleep(0.01)
            if part == b"STALL":
                await asyncio.sleep(1.5)
                continue
            stamps.append(perf_counter_ns())
            await response.write(part)
        if script == "abort":
            assert request.transport is not None
            request.transport.close()
            return response
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}", sent
    await runner.cleanup()


REQUEST = RequestSpec(index=3, input_len=5, max_tokens=6, body=b"{}")
CLIENTS = ("native", "aiohttp")


@contextlib.asynccontextmanager
async def open_streams(
    kind: str, max_connections: int, read_bufsize: int | None = None
) -> AsyncIterator[StreamClient]:
    """The measured-stream client `--http-client kind` would use."""
    if kind == "native":
        native = NativeStreams(max_connections=max_connections)
        try:
            yield native
        finally:
            await native.close()
        return
    bufsize = READ_BUFSIZE if read_bufsize is None else read_bufsize
    async with open_session(
        max_connections=max_connections, stamping=True, read_bufsize=bufsize
    ) as session:
        yield AiohttpStreams(session)


# A count above max_tokens is malformed (tests/client/test_hostile.py): the long script's
# 300,000 tokens need a request that allows them.
LONG_REQUEST = RequestSpec(index=3, input_len=5, max_tokens=300_000, body=b"{}")


async def send(
    base: str,
    script: str,
    session: StreamClient,
    *,
    limit_s: float | None = None,
    rid: str = "r1",
    request: RequestSpec = REQUEST,
) -> tuple[RequestRecord, list[Any]]:
    seen: list[RequestRecord] = []
    transport = Transport(session, f"{base}/v1/completions?s={script}", request_timeout_s=limit_s)
    record = await transport.send(
        request, x_request_id=rid, conc=2, scheduled_ns=1, on_record=seen.append
    )
    return record, seen


@pytest.mark.parametrize("kind", CLIENTS)
async def test_ok_stream_exact_tokens_and_stamps(sse_server: SseServer, kind: str) -> None:
    base, sent = sse_server
    async with open_streams(kind, 2) as session:
        record, seen = await send(base, "ok", session)
    assert seen == [record] and record.ok and record.status == 200
    assert record.chunk_tokens == (1, 2, 3) and record.completion_tokens == 6
    assert record.prompt_tokens == 5 and record.token_source.value == "token_ids"
    assert (record.request_id, record.conc, record.scheduled_ns) == (3, 2, 1)
    assert record.connect_ns > 0  # first request on a new connection
    # Every chunk stamped after the server wrote it and within the loop's own slack.
    for server_ns, client_ns in zip(sent["r1"], record.chunk_ns, strict=False):
        assert 0 < client_ns - server_ns < 5_000_000
    assert record.start_ns < sent["r1"][0]
    assert record.end_ns >= record.chunk_ns[-1]
    assert record.e2el_ns is not None and record.ttft_ns is not None
    gaps = zip(record.chunk_ns, record.chunk_ns[1:], strict=False)
    assert record.e2el_ns - record.ttft_ns == sum(b - a for a, b in gaps)


@pytest.mark.parametrize("kind", CLIENTS)
async def test_long_event_has_no_size_limit(sse_server: SseServer, kind: str) -> None:
    base, _ = sse_server
    async with open_streams(kind, 1) as session:
        record, _ = await send(base, "long", session, request=LONG_REQUEST)
    assert record.ok and record.chunk_tokens == (300_000,)


async def test_paused_reading_resumes(sse_server: SseServer) -> None:
    """A tiny read buffer makes aiohttp pause the socket; the protocol must resume it."""
    base, _ = sse_server
    async with open_streams("aiohttp", 1, read_bufsize=1024) as session:
        record, _ = await send(base, "long", session, limit_s=20, request=LONG_REQUEST)
        again, _ = await send(base, "ok", session, limit_s=20)
    assert record.ok and record.chunk_tokens == (300_000,)
    assert again.ok and again.chunk_tokens == (1, 2, 3)


@pytest.mark.parametrize("kind", CLIENTS)
async def test_split_events_and_connection_reuse(sse_server: SseServer, kind: str) -> None:
    base, sent = sse_server
    async with open_streams(kind, 1) as session:
        first, _ = await send(base, "split", session, rid="a")
        second, _ = await send(base, "split", session, rid="b")
    assert first.ok and first.chunk_tokens == (1, 1)
    assert second.ok and second.connect_ns == 0  # kept alive and reused
    # The event split over two writes is stamped at the write holding its first byte.
    assert sent["b"][0] < second.chunk_ns[0] < sent["b"][1]


@pytest.mark.parametrize(
    ("script", "kind"),
    [
        ("abort", ErrorKind.DISCONNECT),
        ("malformed", ErrorKind.MALFORMED),
        ("server_error", ErrorKind.SERVER_ERROR),
        ("http500", ErrorKind.HTTP),
        ("json", ErrorKind.MALFORMED),
    ],
)
@pytest.mark.parametrize("client", CLIENTS)
async def test_failures_become_error_kinds(
    sse_server: SseServer, script: str, kind: ErrorKind, client: str
) -> None:
    base, _ = sse_server
    async with open_streams(client, 1) as session:
        record, seen = await send(base, script, session)
    assert seen == [record] and record.error is kind and record.error_detail
    if script == "http500":
        assert record.status == 500 and "HTTP 500" in record.error_detail
    elif script == "json":
        assert "text/event-stream" in record.error_detail and not record.chunk_tokens
    else:
        assert record.chunk_tokens[0] == 1  # what arrived before the failure is kept


@pytest.mark.parametrize("kind", CLIENTS)
async def test_timeout_and_cancel_keep_partial_records(sse_server: SseServer, kind: str) -> None:
    base, _ = sse_server
    async with open_streams(kind, 2) as session:
        record, _ = await send(base, "stall", session, limit_s=0.3)
        assert record.error is ErrorKind.TIMEOUT and record.chunk_tokens == (1,)
        seen: list[RequestRecord] = []
        transport = Transport(session, f"{base}/v1/completions?s=stall")
        task = asyncio.create_task(
            transport.send(REQUEST, x_request_id="c", conc=1, scheduled_ns=0, on_record=seen.append)
        )
        await asyncio.sleep(0.3)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
    assert len(seen) == 1 and seen[0].error is ErrorKind.CANCELLED
    assert seen[0].chunk_tokens == (1,)


@pytest.mark.parametrize("kind", CLIENTS)
async def test_connection_refused_is_connect_error(kind: str) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    async with open_streams(kind, 1) as session:
        record, _ = await send(f"http://127.0.0.1:{port}", "ok", session)
    assert record.error is ErrorKind.CONNECT and record.status is None


async def test_connector_uses_stamping_protocol() -> None:
    """Guards the one private aiohttp seam (TCPConnector._factory) against upgrades; only
    the aiohttp streams client's session uses it, a native run's is aiohttp's own."""
    async with open_session(max_connections=1, stamping=True) as session:
        connector = session.connector
        assert isinstance(connector, StampingConnector)
        assert connector._factory.func is StampingResponseHandler
    async with open_session(max_connections=1) as session:
        assert type(session.connector) is aiohttp.TCPConnector
    with pytest.raises(ValueError, match="stamping=True"):
        AiohttpStreams(session)


def test_a_native_run_never_imports_the_private_seam() -> None:
    """An aiohttp release that moved its internals cannot stop a native run: nothing on
    that path imports aiohttp_seam (checked in a fresh interpreter)."""
    code = (
        "import sys, loadgen.cli, loadgen.run.backend, loadgen.scale.worker, "
        "loadgen.client.transport, loadgen.sidecar.service, loadgen.sidecar.serve; "
        "print('loadgen.client.aiohttp_seam' in sys.modules)"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def test_private_aiohttp_access_lives_in_the_seam_only() -> None:
    """Everything else goes through aiohttp's public API, so an upgrade breaks one module."""
    import re
    from pathlib import Path

    import loadgen

    private = re.compile(
        r"aiohttp\.client_proto|aiohttp\.http_parser|\._(payload|factory|"
        r"protocol|buffer_paused|reading_paused)\b|\"_protocol\""
    )
    root = Path(loadgen.__file__).parent
    offenders = [
        str(path.relative_to(root))
        for path in root.rglob("*.py")
        if path.name != "aiohttp_seam.py" and private.search(path.read_text())
    ]
    assert offenders == []


def test_the_seam_accepts_the_installed_aiohttp() -> None:
    from loadgen.client.aiohttp_seam import check_private_api

    check_private_api()  # raises SetupError naming what moved
