"""The sidecar passes --reset-prefix-cache on (it resets only its own target: the
servers it may reach, `server-metrics` being refused), and a target without the
endpoint fails the run with the one line (docs/sidecar.md, issue item: resets against
its own target are allowed)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path

from loadgen.sidecar.options import allowed_options
from loadgen.sim.server import SimConfig, running_simulator
from tests.support.sidecar import MODEL, QUICK, call, sidecar, wait_for


@asynccontextmanager
async def simulator(dev_mode: bool) -> AsyncIterator[str]:
    config = SimConfig(model=MODEL, spec_tokens=2, step_fixed_ms=2.0, dev_mode=dev_mode)
    async with running_simulator(config, host="127.0.0.1", port=0) as sim:
        yield str(sim.base_url)


def test_the_reset_options_are_allowed() -> None:
    allowed = allowed_options()
    for name in ("reset_prefix_cache", "reset_after_warmup", "reset_external", "reset_timeout"):
        assert name in allowed
    assert "server_metrics" not in allowed  # so a reset reaches the sidecar's target only


async def test_a_run_with_resets_records_each_points_cache_state(tmp_path: Path) -> None:
    async with simulator(dev_mode=True) as target, sidecar(tmp_path, target) as client:
        options = {**QUICK, "reset_prefix_cache": True, "reset-after-warmup": True}
        status, started = await call(client, "POST", "/v1/runs", options)
        assert status == 202, started
        await wait_for(client, started["id"], states={"succeeded"})
        status, results = await call(client, "GET", f"/v1/runs/{started['id']}/results")
    assert status == 200
    points = [r["result"] for r in results["results"] if "max_concurrency" in r["result"]]
    assert sorted(p["max_concurrency"] for p in points) == [1, 2]
    assert {p["cache_state"] for p in points} == {"reset"}


async def test_a_target_without_the_endpoint_fails_the_run_with_the_line(tmp_path: Path) -> None:
    async with simulator(dev_mode=False) as target, sidecar(tmp_path, target) as client:
        status, started = await call(
            client, "POST", "/v1/runs", {**QUICK, "reset_prefix_cache": True}
        )
        assert status == 202, started
        run = await wait_for(client, started["id"], states={"failed"})
    assert "VLLM_SERVER_DEV_MODE=1" in run["error"] and "\n" not in run["error"], run
