"""The simulator's POST /start_profile and /stop_profile, as vLLM 0.32 serves them
(vllm/entrypoints/serve/profile/api_router.py; loadgen/client/server_profiler.py says
where that was read): only with a profiler (--profiler-dir; else 404, a GET 405 when
there), an optional strict body, 409 while a session is open, a stop that answers 200
also with none open; each window one trace file of the steps it saw, after
`delay_iterations`, at most `max_iterations`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import orjson

from tests.support.sim_helpers import SimFactory, fetch, post_stream

BODY = {"prompt": list(range(1000, 1016)), "max_tokens": 20, "ignore_eos": True}


def _traces(directory: Path) -> dict[str, Any]:
    """Each trace file's name and content."""
    return {p.name: orjson.loads(p.read_bytes()) for p in directory.iterdir()}


async def test_routes_only_with_a_profiler(sim_factory: SimFactory, tmp_path: Path) -> None:
    async with sim_factory() as sim:
        for method in ("POST", "GET"):
            status, _, _ = await fetch(method, sim.base_url + "/stop_profile")
            assert status == 404
    async with sim_factory(profiler_dir=str(tmp_path)) as sim:
        status, _, _ = await fetch("GET", sim.base_url + "/stop_profile")
        assert status == 405  # there, for POST only: what loadgen's check relies on
        status, _, _ = await fetch("POST", sim.base_url + "/stop_profile")
        assert status == 200  # nothing open: nothing written
    assert _traces(tmp_path) == {}


async def test_a_window_holds_its_steps_and_follows_the_body(
    sim_factory: SimFactory, tmp_path: Path
) -> None:
    url = "{}/start_profile"
    async with (
        sim_factory(profiler_dir=str(tmp_path), step_fixed_ms=1.0, spec_tokens=0) as sim,
        aiohttp.ClientSession() as session,
    ):
        start = url.format(sim.base_url)
        for bad in ({"profile_prefix": "-x"}, {"max_iterations": -1}, {"delay_iterations": "2"}):
            status, _, _ = await fetch("POST", start, json=bad)
            assert status == 400, bad
        window = {"profile_prefix": "p1", "delay_iterations": 3, "max_iterations": 5}
        assert (await fetch("POST", start, json=window))[0] == 200
        status, _, body = await fetch("POST", start)  # a second session while one is open
        assert status == 409 and b"already active" in body
        await post_stream(
            session, sim.base_url + "/v1/completions", BODY, headers={"X-Request-Id": "r1"}
        )
        assert (await fetch("POST", sim.base_url + "/stop_profile"))[0] == 200
        assert (await fetch("POST", start))[0] == 200  # closed: a new one may start
        assert (await fetch("POST", sim.base_url + "/stop_profile"))[0] == 200
    traces = _traces(tmp_path)
    first, second = sorted(traces, key=lambda name: not name.startswith("p1_"))
    assert first.startswith("p1_sim_engine.") and second.startswith("sim_engine.")
    steps = traces[first]["steps"]
    # 20 steps ran (a prefill, 19 decodes): the first 3 skipped, then 5 kept
    assert len(steps) == 5 and all(s["requests"] == ["r1"] for s in steps)
    assert traces[second] == {"profile_prefix": None, "steps": []}
