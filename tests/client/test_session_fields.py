"""A session request carries its affinity headers, and its record the session fields and
the server's cached_tokens (a real aiohttp server on 127.0.0.1)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest
from aiohttp import web

from loadgen.client.native.client import NativeStreams
from loadgen.client.transport import Transport
from loadgen.workload.plan import RequestSpec

EVENTS = [
    b'data: {"choices":[{"index":0,"text":"a","token_ids":[7]}],'
    b'"usage":{"prompt_tokens":130,"completion_tokens":1}}\n\n',
    b'data: {"choices":[],"usage":{"prompt_tokens":130,"total_tokens":131,'
    b'"completion_tokens":1,"prompt_tokens_details":{"cached_tokens":128}}}\n\n',
    b"data: [DONE]\n\n",
]


@pytest.fixture
async def server() -> AsyncIterator[tuple[str, list[dict[str, str]]]]:
    seen: list[dict[str, str]] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        seen.append({k.lower(): v for k, v in request.headers.items()})
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for event in EVENTS:
            await response.write(event)
        await response.write_eof()
        return response

    app = web.Application()
    app.router.add_post("/v1/completions", handler)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
    yield f"http://127.0.0.1:{port}/v1/completions", seen
    await runner.cleanup()


async def test_session_headers_fields_and_cached_tokens(
    server: tuple[str, list[dict[str, str]]],
) -> None:
    url, seen = server
    request = RequestSpec(
        index=0,
        input_len=130,
        max_tokens=1,
        body=b"{}",
        session_id="run.0.1:trace-a::sa0",
        turn_index=4,
        tree_id="run.0.1:trace-a",
        headers=(
            ("X-Session-ID", "run.0.1:trace-a::sa0"),
            ("X-SMG-Routing-Key", "run.0.1:trace-a::sa0"),
        ),
        theoretical_cached_tokens=128,
    )
    client = NativeStreams(max_connections=1)
    try:
        record = await Transport(client, url).send(
            request, x_request_id="r", conc=1, scheduled_ns=1, on_record=lambda r: None
        )
    finally:
        await client.close()
    assert seen[0]["x-session-id"] == seen[0]["x-smg-routing-key"] == "run.0.1:trace-a::sa0"
    assert seen[0]["x-request-id"] == "r"
    assert record.ok and record.cached_tokens == 128 and record.prompt_tokens == 130
    assert (record.session_id, record.turn_index, record.tree_id) == (
        "run.0.1:trace-a::sa0",
        4,
        "run.0.1:trace-a",
    )
    assert record.theoretical_cached_tokens == 128
