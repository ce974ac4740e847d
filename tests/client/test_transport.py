"""The transport against a small real SSE server on 127.0.0.1 (port 0), through the native client.

The server here is deliberately minimal (scripted byte streams, not the simulator) so
each wire situation -- split events, missing [DONE], bad JSON, HTTP errors, stalls -- is
exact and fast; raw-socket wire cases of the native client are in test_native.py. (The
aiohttp comparison client lives in bench/aiohttp_client.py, outside the product.)
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator
from time import perf_counter_ns
from typing import Any

import pytest
from aiohttp import web

from loadgen.client.native.client import NativeStreams
from loadgen.client.stream_client import StreamClient
from loadgen.client.transport import Transport
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
CLIENTS = ("native",)  # the clients of the measured streams: loadgen has one


@contextlib.asynccontextmanager
async def open_streams(kind: str, max_connections: int) -> AsyncIterator[StreamClient]:
    """The measured-stream client named `kind`."""
    assert kind == "native"
    native = NativeStreams(max_connections=max_connections)
    try:
        yield native
    finally:
        await native.close()


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
    # Every chunk stamped after the server wrote it (how soon after: the test below).
    assert all(c > s for s, c in zip(sent["r1"], record.chunk_ns, strict=False))
    assert record.start_ns < sent["r1"][0]
    assert record.end_ns >= record.chunk_ns[-1]
    assert record.e2el_ns is not None and record.ttft_ns is not None
    gaps = zip(record.chunk_ns, record.chunk_ns[1:], strict=False)
    assert record.e2el_ns - record.ttft_ns == sum(b - a for a, b in gaps)


@pytest.mark.exclusive
@pytest.mark.parametrize("kind", CLIENTS)
async def test_chunks_are_stamped_within_the_loops_slack(sse_server: SseServer, kind: str) -> None:
    """Subject: how soon after the server's write each chunk is stamped (under 5 ms: the
    loop's own slack, server and client sharing it); the lags are printed, run alone."""
    base, sent = sse_server
    async with open_streams(kind, 2) as session:
        record, _ = await send(base, "ok", session)
    lags = [c - s for s, c in zip(sent["r1"], record.chunk_ns, strict=False)]
    print(f"chunk stamps after the server's writes: {[f'{lag / 1e3:.0f} us' for lag in lags]}")
    assert all(0 < lag < 5_000_000 for lag in lags), lags


@pytest.mark.parametrize("kind", CLIENTS)
async def test_long_event_has_no_size_limit(sse_server: SseServer, kind: str) -> None:
    base, _ = sse_server
    async with open_streams(kind, 1) as session:
        record, _ = await send(base, "long", session, request=LONG_REQUEST)
    assert record.ok and record.chunk_tokens == (300_000,)


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
    base, stamps = sse_server
    async with open_streams(kind, 2) as session:
        record, _ = await send(base, "stall", session, limit_s=0.3)
        assert record.error is ErrorKind.TIMEOUT and record.chunk_tokens == (1,)
        seen: list[RequestRecord] = []
        transport = Transport(session, f"{base}/v1/completions?s=stall")
        task = asyncio.create_task(
            transport.send(REQUEST, x_request_id="c", conc=1, scheduled_ns=0, on_record=seen.append)
        )
        # cancel 0.3 s after the server wrote the first chunk (it then stalls 1.5 s), not
        # 0.3 s after sending: on a busy machine (a CI run) the write came later than that
        for _ in range(1000):  # up to 10 s
            if stamps.get("c"):
                break
            await asyncio.sleep(0.01)
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
