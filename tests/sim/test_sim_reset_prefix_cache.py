"""The simulator's POST /reset_prefix_cache, as vLLM 0.32 serves it
(vllm/entrypoints/serve/dev/cache/api_router.py): only in dev mode (VLLM_SERVER_DEV_MODE=1,
else 404), `{"success": false}` while a request holds blocks, otherwise every cached
block forgotten and `{"success": true}`."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson
import pytest

from loadgen.sim.config import ConfigError
from loadgen.sim.parser import server_dev_mode
from tests.support.sim_helpers import SimFactory, fetch, final_usage, post_stream

BODY = {
    "prompt": list(range(1000, 1300)),  # 18 full blocks of 16
    "max_tokens": 2,
    "stream_options": {"include_usage": True},
}
DETAILS = {"enable_prompt_tokens_details": True, "spec_tokens": 0}


async def _cached(session: aiohttp.ClientSession, base_url: str) -> int:
    events = await post_stream(session, base_url + "/v1/completions", BODY)
    cached: int = final_usage(events)["prompt_tokens_details"]["cached_tokens"]
    return cached


async def test_idle_reset_forgets_every_block(sim_factory: SimFactory) -> None:
    async with sim_factory(dev_mode=True, **DETAILS) as sim, aiohttp.ClientSession() as session:
        assert await _cached(session, sim.base_url) == 0
        assert await _cached(session, sim.base_url) == 18 * 16  # every full block
        status, headers, body = await fetch("POST", sim.base_url + "/reset_prefix_cache")
        assert status == 200 and headers["Content-Type"].startswith("application/json")
        assert orjson.loads(body) == {"success": True}
        assert await _cached(session, sim.base_url) == 0
        # vLLM's query parameters are accepted (FastAPI booleans), a bad one is a 400
        status, _, body = await fetch(
            "POST", sim.base_url + "/reset_prefix_cache?reset_external=true"
        )
        assert (status, orjson.loads(body)) == (200, {"success": True})
        status, _, body = await fetch("POST", sim.base_url + "/reset_prefix_cache?reset_external=x")
        assert status == 400 and b"valid boolean" in body


async def test_refused_while_a_request_holds_blocks(sim_factory: SimFactory) -> None:
    slow = {**DETAILS, "step_fixed_ms": 5.0}
    async with sim_factory(dev_mode=True, **slow) as sim, aiohttp.ClientSession() as session:
        await _cached(session, sim.base_url)
        long = {**BODY, "max_tokens": 400, "ignore_eos": True}
        running = asyncio.create_task(post_stream(session, sim.base_url + "/v1/completions", long))
        await asyncio.sleep(0.3)
        assert not running.done()
        status, _, body = await fetch("POST", sim.base_url + "/reset_prefix_cache")
        assert (status, orjson.loads(body)) == (200, {"success": False})
        await running
        status, _, body = await fetch("POST", sim.base_url + "/reset_prefix_cache")
        assert (status, orjson.loads(body)) == (200, {"success": True})
        assert await _cached(session, sim.base_url) == 0


async def test_404_without_dev_mode(sim_factory: SimFactory) -> None:
    async with sim_factory(**DETAILS) as sim, aiohttp.ClientSession() as session:
        await _cached(session, sim.base_url)
        status, _, _ = await fetch("POST", sim.base_url + "/reset_prefix_cache")
        assert status == 404
        assert await _cached(session, sim.base_url) > 0  # nothing was reset


def test_dev_mode_is_read_from_the_environment_as_vllm_reads_it() -> None:
    assert server_dev_mode({}) is False
    assert server_dev_mode({"VLLM_SERVER_DEV_MODE": "0"}) is False
    assert server_dev_mode({"VLLM_SERVER_DEV_MODE": "1"}) is True
    with pytest.raises(ConfigError, match="VLLM_SERVER_DEV_MODE='yes'"):
        server_dev_mode({"VLLM_SERVER_DEV_MODE": "yes"})
