"""client/cache_reset.py over real sockets: every server loadgen knows is reset (the
target and each --server-metrics URL's), SGLang's /flush_cache is found and retried
while it answers 400, an answer without `success` is a failure with its reason, and a
server with neither endpoint stops the run with the one line."""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

import aiohttp
import pytest
from aiohttp import web

from loadgen.client.cache_reset import HttpCacheReset, ResetUnavailable, reset_servers
from loadgen.client.http_session import open_session
from loadgen.sim import SimConfig, running_simulator
from loadgen.sim.server import RunningSimulator

FAST = SimConfig(
    model="sim-model", spec_tokens=0, step_fixed_ms=1.0, enable_prompt_tokens_details=True
)
PROMPT = {"prompt": list(range(1000, 1100)), "max_tokens": 1, "model": "sim-model"}


def test_reset_servers_are_the_target_and_each_metrics_urls_server() -> None:
    assert reset_servers(
        "http://a:8000/",
        ["http://b:8000/metrics", "http://a:8000/metrics", "http://r/w1/metrics", "http://c:1"],
    ) == ("http://a:8000", "http://b:8000", "http://r/w1", "http://c:1")


async def _cached(sim: RunningSimulator) -> int:
    async with (
        aiohttp.ClientSession() as session,
        session.post(sim.base_url + "/v1/completions", json=PROMPT) as response,
    ):
        body = await response.json()
    cached: int = body["usage"]["prompt_tokens_details"]["cached_tokens"]
    return cached


async def test_every_known_server_is_reset() -> None:
    config = dataclasses.replace(FAST, dev_mode=True)
    async with (
        running_simulator(config) as target,
        running_simulator(config) as worker,
        open_session(timeout_s=10) as session,
    ):
        for sim in (target, worker):
            await _cached(sim)
            assert await _cached(sim) > 0
        reset = HttpCacheReset(
            session,
            reset_servers(target.base_url, [worker.base_url + "/metrics"]),
            timeout_s=5,
            reset_external=True,
        )
        await reset.check()
        state = await reset.reset()
        assert (state.cache_state, state.cache_reset_detail) == ("reset", None)
        assert await _cached(target) == 0 and await _cached(worker) == 0


@asynccontextmanager
async def _server(app: web.Application) -> AsyncIterator[str]:
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


async def test_sglang_flush_is_found_and_retried_while_requests_run() -> None:
    calls: list[int] = []

    async def flush(_request: web.Request) -> web.Response:
        calls.append(len(calls))
        if len(calls) <= 3:  # the check's call, then two refusals: requests still run
            return web.Response(status=400, text="Cache not flushed: running requests")
        return web.Response(text="Cache flushed.")

    app = web.Application()
    app.router.add_post("/flush_cache", flush)
    async with _server(app) as url, open_session(timeout_s=10) as session:
        reset = HttpCacheReset(session, [url], timeout_s=10)
        await reset.check()
        assert reset.flavours == {url: "sglang"}
        state = await reset.reset()
    assert state.cache_state == "reset" and len(calls) == 4


async def test_an_answer_without_success_is_a_failure_with_its_reason() -> None:
    async def odd(_request: web.Request) -> web.Response:
        return web.json_response({"ok": True})

    app = web.Application()
    app.router.add_post("/reset_prefix_cache", odd)
    async with _server(app) as url, open_session(timeout_s=10) as session:
        reset = HttpCacheReset(session, [url], timeout_s=10)
        await reset.check()
        state = await reset.reset()
    assert state.cache_state == "reset_failed"
    assert state.cache_reset_detail is not None and "no success field" in state.cache_reset_detail


async def test_neither_endpoint_is_the_dev_mode_line() -> None:
    async with _server(web.Application()) as url, open_session(timeout_s=10) as session:
        reset = HttpCacheReset(session, [url], timeout_s=10)
        with pytest.raises(ResetUnavailable) as caught:
            await reset.check()
    line = str(caught.value)
    assert "\n" not in line and "VLLM_SERVER_DEV_MODE=1" in line and url in line
    assert caught.value.exit_code == 1
