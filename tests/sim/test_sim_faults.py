"""Every fault mode, observed the way a raw client sees it, and deterministic under the seed."""

from __future__ import annotations

import asyncio
import itertools
import time
from typing import Any

import aiohttp
import orjson
import pytest

from loadgen.sim.config import FaultConfig, SimConfig
from loadgen.sim.faults import draw_faults
from tests.support.sim_helpers import SimFactory, fetch

MODEL = SimConfig().model
BODY: dict[str, Any] = {
    "model": MODEL,
    "prompt": "Say something long.",
    "ignore_eos": True,
    "max_tokens": 40,
    "stream": True,
    "return_token_ids": True,
    "stream_options": {"include_usage": True},
}


async def read_raw_stream(url: str) -> tuple[list[bytes], BaseException | None, list[float]]:
    """The stream's `data:` payloads, the error that ended it (if any), arrival times."""
    payloads: list[bytes] = []
    times: list[float] = []
    buffer = b""
    error: BaseException | None = None
    async with aiohttp.ClientSession() as session, session.post(url, json=BODY) as response:
        assert response.status == 200
        try:
            async for data in response.content.iter_any():
                buffer += data
                while b"\n\n" in buffer:
                    event, buffer = buffer.split(b"\n\n", 1)
                    payloads.append(event.removeprefix(b"data: "))
                    times.append(time.perf_counter())
        except aiohttp.ClientPayloadError as exc:
            error = exc
    return payloads, error, times


async def test_500_before_streaming(sim_factory: SimFactory) -> None:
    async with sim_factory(faults=FaultConfig(error_500=1.0)) as sim:
        status, _, body = await fetch("POST", sim.base_url + "/v1/completions", json=BODY)
    assert status == 500
    assert orjson.loads(body)["error"]["code"] == 500


async def test_abort_mid_stream_closes_without_done(sim_factory: SimFactory) -> None:
    async with sim_factory(faults=FaultConfig(abort=1.0)) as sim:
        payloads, error, _ = await read_raw_stream(sim.base_url + "/v1/completions")
        status, _, _ = await fetch("GET", sim.base_url + "/health")
    assert isinstance(error, aiohttp.ClientPayloadError)
    assert payloads and b"[DONE]" not in payloads
    assert status == 200  # the server carries on


async def test_one_malformed_chunk(sim_factory: SimFactory) -> None:
    async with sim_factory(faults=FaultConfig(malformed=1.0)) as sim:
        payloads, error, _ = await read_raw_stream(sim.base_url + "/v1/completions")
    assert error is None and payloads[-1] == b"[DONE]"
    broken = []
    for payload in payloads[:-1]:
        try:
            orjson.loads(payload)
        except orjson.JSONDecodeError:
            broken.append(payload)
    assert len(broken) == 1


@pytest.mark.exclusive
async def test_stall_mid_stream(sim_factory: SimFactory) -> None:
    """Subject: the stall fault's timing as a client sees it: one arrival gap of the
    stall's 0.4 s, the others short; the two longest gaps are printed, run alone."""
    async with sim_factory(faults=FaultConfig(stall=1.0, stall_seconds=0.4)) as sim:
        payloads, error, times = await read_raw_stream(sim.base_url + "/v1/completions")
    assert error is None and payloads[-1] == b"[DONE]"
    gaps = [b - a for a, b in itertools.pairwise(times)]
    print(f"stall fault: longest gaps {sorted(gaps)[-1]:.3f} s, {sorted(gaps)[-2]:.3f} s")
    # The stall runs from the stalled chunk's intended send time; that chunk's own send
    # can be late by a few ms on a busy machine, shortening the arrival gap by as much.
    assert max(gaps) >= 0.4 - 0.01
    assert sorted(gaps)[-2] < 0.2  # one stall, not a slow stream


async def test_503_when_the_waiting_queue_is_full(sim_factory: SimFactory) -> None:
    faults = FaultConfig(max_waiting=1)
    async with (
        sim_factory(max_num_seqs=1, faults=faults) as sim,
        aiohttp.ClientSession() as session,
    ):
        url = sim.base_url + "/v1/completions"
        long_body = {**BODY, "max_tokens": 400}
        async with session.post(url, json=long_body) as running:
            await running.content.readuntil(b"\n\n")  # the first request is running
            second = asyncio.create_task(fetch("POST", url, json=long_body))
            for _ in range(1000):  # bounded: the engine admits within a step or two
                if sim_waiting(sim) >= 1:
                    break
                await asyncio.sleep(0.005)
            status, _, body = await fetch("POST", url, json=long_body)
            second.cancel()
    assert status == 503
    assert orjson.loads(body)["error"]["code"] == 503


def sim_waiting(sim: Any) -> float:
    value = sim.registry.get_sample_value(
        "vllm:num_requests_waiting", {"model_name": MODEL, "engine": "0"}
    )
    return float(value or 0.0)


@pytest.mark.parametrize("seed", [0, 1])
def test_fault_draws_are_deterministic_and_near_their_fractions(seed: int) -> None:
    config = FaultConfig(error_500=0.1, abort=0.2, malformed=0.05, stall=0.1)
    draws = [draw_faults(config, seed, i, 100, stream=True) for i in range(4000)]
    assert draws == [draw_faults(config, seed, i, 100, stream=True) for i in range(4000)]
    assert sum(d.error_500 for d in draws) / 4000 == pytest.approx(0.1, abs=0.02)
    assert sum(d.abort_at_token is not None for d in draws) / 4000 == pytest.approx(0.2, abs=0.03)
    assert all(1 <= d.abort_at_token < 100 for d in draws if d.abort_at_token is not None)
    assert not any(
        draw_faults(config, seed, i, 100, stream=False).abort_at_token for i in range(200)
    )


async def test_client_leaving_mid_stream_is_an_abort(sim_factory: SimFactory) -> None:
    async with sim_factory() as sim, aiohttp.ClientSession() as session:
        body = {**BODY, "max_tokens": 5000}
        response = await session.post(sim.base_url + "/v1/completions", json=body)
        await response.content.readuntil(b"\n\n")
        response.close()
        for _ in range(200):  # bounded: the engine notices within a step
            if sim.registry.get_sample_value(
                "vllm:request_success_total",
                {"model_name": MODEL, "engine": "0", "finished_reason": "abort"},
            ):
                break
            await asyncio.sleep(0.01)
        assert (
            sim.registry.get_sample_value(
                "vllm:num_requests_running", {"model_name": MODEL, "engine": "0"}
            )
            == 0
        )
        status, _, _ = await fetch("GET", sim.base_url + "/health")
    assert status == 200
