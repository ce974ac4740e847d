"""The sidecar passes --profile-conc on against its own target (issue item: profiler
windows against its own target are allowed): the named point is profiled, its trace
written by the target; a target without a profiler fails the run with the one line."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from loadgen.sidecar.options import allowed_options
from loadgen.sim.server import SimConfig, running_simulator
from tests.support.sidecar import MODEL, QUICK, call, sidecar, wait_for


@asynccontextmanager
async def simulator(profiler_dir: Path | None) -> AsyncIterator[str]:
    config = SimConfig(
        model=MODEL,
        spec_tokens=2,
        step_fixed_ms=2.0,
        profiler_dir=str(profiler_dir) if profiler_dir else None,
    )
    async with running_simulator(config, host="127.0.0.1", port=0) as sim:
        yield str(sim.base_url)


async def test_a_profiled_point_through_the_sidecar(tmp_path: Path) -> None:
    assert "profile_conc" in allowed_options()
    traces = tmp_path / "traces"
    async with simulator(traces) as target, sidecar(tmp_path / "data", target) as client:
        status, started = await call(client, "POST", "/v1/runs", {**QUICK, "profile_conc": [2]})
        assert status == 202, started
        await wait_for(client, started["id"], states={"succeeded"})
        status, results = await call(client, "GET", f"/v1/runs/{started['id']}/results")
    assert status == 200
    points = [r["result"] for r in results["results"] if "max_concurrency" in r["result"]]
    assert {p["max_concurrency"]: p["profiled"] for p in points} == {1: False, 2: True}
    files = list(traces.iterdir())
    assert len(files) == 1 and files[0].name.startswith(
        next(p["profile_prefix"] for p in points if p["profiled"]) + "_"
    ), files


async def test_a_target_without_a_profiler_fails_the_run_with_the_line(tmp_path: Path) -> None:
    async with simulator(None) as target, sidecar(tmp_path, target) as client:
        status, started = await call(client, "POST", "/v1/runs", {**QUICK, "profile_conc": 2})
        assert status == 202, started
        run = await wait_for(client, started["id"], states={"failed"})
    assert "--profiler-config" in run["error"] and "\n" not in run["error"], run
