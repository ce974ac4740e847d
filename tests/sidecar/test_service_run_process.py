"""Each accepted run in a process of its own (issue 36, item 1: the sidecar never builds
a plan in its own process), through a real `loadgen serve` process against the simulator:
a point near the memory limit grows the run's process while the sidecar stays at its
size and /healthz answers; a run's process that dies is a failed run, and the sidecar
goes on serving."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from pathlib import Path
from typing import Any

import aiohttp
import orjson
import pytest

from loadgen.config import limits
from loadgen.config.build_spec import memory_budget
from tests.sidecar.test_service import MODEL, simulator
from tests.sidecar.test_service_limits import (
    healthz_meanwhile,
    post,
    rss_bytes,
    sidecar_process,
)

pytestmark = pytest.mark.timeout(180)

ISL, OSL = 64, 8
# What the run's process is let grow to before the test cancels it: well past the
# sidecar's bound, so that the plan being built is seen where it is built.
CHILD_GROWTH = 768 << 20
# The sidecar's bound: its size at rest (~70 MiB) and the tokenizer it checks a posted
# run's prompts with (~130 MiB, loaded on the first POST), whatever the run asks; a big
# run may add at most RUN_GROWTH to the peak a two-request run left.
SIDECAR_BOUND = 320 << 20
RUN_GROWTH = 32 << 20


def near_the_limit() -> int:
    """prompts-per-conc at 90% of what this machine's memory estimate accepts for one
    point of isl 64 / osl 8 (~2 million on a 23 GiB machine), within the request limit."""
    per_request = limits.point_memory_bytes(1, ISL, OSL)
    return int(min(limits.MAX_REQUESTS_PER_POINT, memory_budget() // per_request) * 0.9)


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()]


async def run_state(client: aiohttp.ClientSession, run_id: str, states: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        async with client.get(f"/v1/runs/{run_id}") as response:
            run = orjson.loads(await response.read())
        if run["state"] in states:
            return dict(run)
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} still {run['state']}")


async def test_a_point_near_the_memory_limit_grows_the_runs_process_not_the_sidecar(
    tmp_path: Path,
) -> None:
    """`prompts-per-conc` near the limit is accepted (202); its prompts are built in the
    run's process, which grows past CHILD_GROWTH, while the sidecar's peak RSS stays
    under PEAK_RSS_BOUND and /healthz answers within a second throughout. Before, the
    sidecar itself grew (1.5 GB after 2 s) until the OOM killer chose."""
    prompts = near_the_limit()
    options = {
        "conc": "1",
        "isl": ISL,
        "osl": OSL,
        "encoder": "raw",
        "warmup-per-conc": 0,
        "prompts-per-conc": prompts,
    }
    async with (
        simulator() as target,
        sidecar_process(tmp_path, target, MODEL) as (pid, client),
    ):
        status, small = await post(client, orjson.dumps({**options, "prompts-per-conc": 2}))
        assert status == 202, small
        assert (await run_state(client, small["id"], {"succeeded", "failed"}))["state"] == (
            "succeeded"
        )
        small_peak = rss_bytes(pid, "VmHWM")
        status, started = await post(client, orjson.dumps(options))
        assert status == 202, started
        stop = asyncio.Event()
        health = asyncio.create_task(healthz_meanwhile(client, stop))
        child_peak, deadline = 0, time.monotonic() + 60
        try:
            while child_peak < CHILD_GROWTH and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                for child in children(pid):
                    child_peak = max(child_peak, rss_bytes(child, "VmHWM"))
            async with client.delete(f"/v1/runs/{started['id']}") as response:
                assert response.status in (200, 202)
            run = await run_state(client, started["id"], {"cancelled"})
        finally:
            stop.set()
            took = await health
        sidecar_peak = rss_bytes(pid, "VmHWM")
        left = children(pid)
    print(
        f"prompts-per-conc {prompts:,}: the run's process reached {child_peak / 2**20:,.0f} "
        f"MiB, the sidecar's peak {sidecar_peak / 2**20:,.0f} MiB (after a 2-request run "
        f"{small_peak / 2**20:,.0f} MiB); /healthz {len(took)} "
        f"answers, slowest {max(took) * 1000:.0f} ms"
    )
    assert child_peak >= CHILD_GROWTH, "the plan was not built in the run's process"
    assert sidecar_peak < min(SIDECAR_BOUND, small_peak + RUN_GROWTH), (small_peak, sidecar_peak)
    assert len(took) >= 5 and max(took) < 1.0, took
    assert run["progress"]["in_flight"] == 0 and left == []


async def test_a_runs_process_that_dies_is_a_failed_run_and_the_sidecar_serves_on(
    tmp_path: Path,
) -> None:
    """The OOM killer's SIGKILL (sent here by the test) ends the run, not the sidecar:
    the run is `failed` with the signal named, and the next run is accepted."""
    options = {
        "conc": "1",
        "isl": ISL,
        "osl": 200,
        "encoder": "raw",
        "warmup-per-conc": 0,
        "prompts-per-conc": 500,
    }
    async with (
        simulator(step_ms=5.0) as target,
        sidecar_process(tmp_path, target, MODEL) as (pid, client),
    ):
        status, started = await post(client, orjson.dumps(options))
        assert status == 202, started
        deadline = time.monotonic() + 30
        while not children(pid):
            assert time.monotonic() < deadline, "no run process"
            await asyncio.sleep(0.05)
        [child] = children(pid)
        os.kill(child, signal.SIGKILL)
        run = await run_state(client, started["id"], {"failed"})
        assert "ended by SIGKILL" in run["error"] and "\n" not in run["error"], run
        async with client.get("/healthz") as response:
            assert response.status == 200 and not (await response.json())["busy"]
        status, again = await post(client, orjson.dumps({**options, "prompts-per-conc": 2}))
        assert status == 202, again
        done = await run_state(client, again["id"], {"succeeded", "failed"})
        assert done["state"] == "succeeded", done
        assert done["points"][0]["completed"] == 2
