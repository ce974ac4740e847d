"""Each accepted run in a process of its own (issue 36, item 1: the sidecar never builds
a plan in its own process), through a real `loadgen serve` process against the simulator:
a point near the memory limit grows the run's process while the sidecar stays at its
size and /healthz answers; a run's process that dies is a failed run, and the sidecar
goes on serving."""

from __future__ import annotations

import asyncio
import contextlib
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
from tests.support.hostile_documents import gzip_bomb
from tests.support.hostile_server import MODEL as HOSTILE_MODEL
from tests.support.hostile_server import (
    MODELS,
    Conn,
    Handler,
    HostileServer,
    Request,
    compressed,
)
from tests.support.sidecar import (
    MODEL,
    healthz_meanwhile,
    post,
    rss_bytes,
    sidecar_process,
    simulator,
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
INFLATED = 512 << 20  # the bomb once inflated (0.5 MB on the wire)
# The run's process past its tokenizer and imports (~250 MiB): its preflight is over
# (the bomb must meet the sidecar's /readyz, not the run's own model lookup)
BUILDING = 384 << 20


def near_the_limit() -> int:
    """prompts-per-conc at 90% of what this machine's memory estimate accepts for one
    point of isl 64 / osl 8 (~2 million on a 23 GiB machine), within the request limit."""
    per_request = limits.point_memory_bytes(1, ISL, OSL)
    return int(min(limits.MAX_REQUESTS_PER_POINT, memory_budget() // per_request) * 0.9)


def children(pid: int) -> list[int]:
    path = Path(f"/proc/{pid}/task/{pid}/children")
    return [int(child) for child in path.read_text().split()]


def children_peak(pid: int) -> int:
    """The largest peak RSS among the live children (a zombie has none, nor a process
    that ended since it was listed)."""
    peaks = [0]
    for child in children(pid):
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{child}/status").read_text()
            if "VmHWM:" in status:
                peaks.append(rss_bytes(child, "VmHWM"))
    return max(peaks)


async def run_state(client: aiohttp.ClientSession, run_id: str, states: set[str]) -> dict[str, Any]:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        async with client.get(f"/v1/runs/{run_id}") as response:
            run = orjson.loads(await response.read())
        if run["state"] in states:
            return dict(run)
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} still {run['state']}")


def bomb_once_told(bombing: asyncio.Event) -> Handler:
    """/v1/models as a minimal vLLM answers it (the runs' preflights) until `bombing` is
    set, then a gzip bomb (the /readyz calls the test makes meanwhile)."""
    bomb = compressed(gzip_bomb(INFLATED), "application/json")

    async def handle(request: Request, conn: Conn) -> None:
        await (bomb if bombing.is_set() else MODELS)(request, conn)

    return handle


async def readyz_refuses(client: aiohttp.ClientSession) -> None:
    async with client.get("/readyz", timeout=aiohttp.ClientTimeout(total=10)) as response:
        answer = await response.json()
    assert response.status == 503, answer
    assert "the answer is compressed (Content-Encoding 'gzip')" in answer["error"], answer


async def test_a_point_near_the_memory_limit_grows_the_runs_process_not_the_sidecar(
    tmp_path: Path,
) -> None:
    """`prompts-per-conc` near the limit is accepted (202); its prompts are built in the
    run's process, which grows past CHILD_GROWTH, while the sidecar's peak RSS stays
    under SIDECAR_BOUND (and within RUN_GROWTH of what a 2-request run left), through
    /readyz calls whose target answers a gzip bomb meanwhile, and /healthz answers
    within a second throughout. Before, the sidecar itself grew (1.5 GB after 2 s)
    until the OOM killer chose."""
    prompts = near_the_limit()
    options = {
        "conc": "1",
        "isl": ISL,
        "osl": OSL,
        "encoder": "raw",
        "warmup-per-conc": 0,
        "prompts-per-conc": prompts,
    }
    bombing = asyncio.Event()
    async with (
        HostileServer({"/v1/models": bomb_once_told(bombing)}) as target,
        sidecar_process(tmp_path, target.base_url, HOSTILE_MODEL) as (pid, client),
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
        child_peak, deadline, refused = 0, time.monotonic() + 60, 0
        try:
            while child_peak < CHILD_GROWTH and time.monotonic() < deadline:
                await asyncio.sleep(0.2)
                child_peak = max(child_peak, children_peak(pid))
                if child_peak > BUILDING:  # its preflight is over: building the plan
                    bombing.set()
                    await readyz_refuses(client)
                    refused += 1
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
        f"{small_peak / 2**20:,.0f} MiB), {refused} gzip-bomb /readyz; /healthz {len(took)} "
        f"answers, slowest {max(took) * 1000:.0f} ms"
    )
    assert child_peak >= CHILD_GROWTH, "the plan was not built in the run's process"
    assert sidecar_peak < min(SIDECAR_BOUND, small_peak + RUN_GROWTH), (small_peak, sidecar_peak)
    assert refused >= 3
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
