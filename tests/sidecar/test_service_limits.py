"""Work bounded before it is built, through a real `loadgen serve` process: a request
sizing more work than any run needs is one 400 naming the option and its limit, the
sidecar's memory stays where it was, and /healthz answers throughout (issue 36, item 1).

The sidecar runs under an address-space limit, so that a regression fails this test with
a MemoryError in the sidecar instead of taking the machine's memory."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.config.limits import MAX_POINT_SECONDS, MAX_REQUESTS_PER_POINT
from tests.support.sidecar import healthz_meanwhile, post, rss_bytes, sidecar_process

# What the sidecar may reach through the refused requests: what it holds after starting
# (~65 MB here), never the plan (1.5 GB after 2 s before the limits).
PEAK_RSS_BOUND = 256 << 20


# (the body, words its one-line 400 must hold: the option and its limit)
REFUSED = [
    (
        b'{"conc":"1","isl":64,"osl":8,"prompts-per-conc":100000000}',
        ["--prompts-per-conc 100000000", f"{MAX_REQUESTS_PER_POINT:,}"],
    ),
    (
        b'{"conc":"1","isl":64,"osl":8,"num-prompts":1000000000000000}',
        ["--num-prompts 1000000000000000", f"{MAX_REQUESTS_PER_POINT:,}"],
    ),
    (
        b'{"conc":"1","isl":64,"osl":8,"rate-stages":"1000000@1000000s"}',
        ["--rate-stages", f"{MAX_POINT_SECONDS:g} seconds"],
    ),
    (
        b'{"conc":"1","isl":64,"osl":8,"request-rate":1e-300}',
        ["--request-rate 1e-300", "0.001..1e+06 requests/s"],
    ),
    (  # a sweep document's lane: the same limits
        b'{"conc":"1","workload":{"isl":64,"osl":8},'
        b'"lanes":[{"name":"a","prompts-per-conc":100000000}]}',
        ["lanes[0]", "--prompts-per-conc 100000000", f"{MAX_REQUESTS_PER_POINT:,}"],
    ),
]


async def test_work_past_the_limits_is_a_400_and_the_sidecar_stays_small(
    tmp_path: Path,
) -> None:
    async with sidecar_process(tmp_path) as (pid, client):
        status, _ = await post(client, b'{"conc":"1","isl":64,"osl":8,"conc":"x"}')
        assert status == 400  # the tokenizer and parsers loaded: the baseline after them
        baseline = rss_bytes(pid, "VmRSS")
        stop = asyncio.Event()
        health = asyncio.create_task(healthz_meanwhile(client, stop))
        try:
            for body, words in REFUSED:
                status, answer = await post(client, body)
                assert status == 400, (body, answer)
                message = answer["error"]
                assert "\n" not in message and all(w in message for w in words), message
                await asyncio.sleep(0.5)  # a plan being built would grow meanwhile
        finally:
            stop.set()
            took = await health
        print(f"/healthz: {len(took)} answers, slowest {max(took) * 1000:.1f} ms")
        assert len(took) >= 5 and max(took) < 1.0, took
        peak = rss_bytes(pid, "VmHWM")
        print(f"sidecar RSS: {baseline / 2**20:.0f} MiB after start, peak {peak / 2**20:.0f} MiB")
        assert peak < max(PEAK_RSS_BOUND, baseline + (64 << 20)), (baseline, peak)
        status, _ = await post(client, b"[]")
        assert status == 400  # still serving, and no run was started by any of them
        async with client.get("/v1/runs") as response:
            assert (await response.json())["runs"] == []


@pytest.mark.parametrize(
    "options",
    [
        {"conc": "1", "isl": 64, "osl": 8, "num-prompts": 200_000},
        {"conc": "1", "isl": 64, "osl": 8, "rate-stages": "5@30s,20@1m"},
        {"conc": "1", "isl": 64, "osl": 8, "request-rate": 0.001, "slice-duration": 0.05},
    ],
)
async def test_work_at_the_limits_is_not_refused_for_its_size(
    tmp_path: Path, options: dict[str, Any]
) -> None:
    """Real runs pass: a 200,000-request point, stages, the slowest rate and the shortest
    slices are accepted (each run then fails at its preflight, before any point is
    built: nothing listens at the target)."""
    async with sidecar_process(tmp_path) as (_, client):
        status, answer = await post(client, orjson.dumps(options))
        assert status == 202, answer
