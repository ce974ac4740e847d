"""A Dynamo frontend as a source: `--server-metrics` with the frontend's URL and its
worker's, and the frontend's own TTFT, per-token ITL, request duration and request count
become the point's frontend_* fields beside the client's and the worker's.

The frontend is a stand-in (tests/support/dynamo_frontend.py: Dynamo's names, observed
as its source observes them; Dynamo itself cannot be built here). Its timings nest by
construction: the worker's TTFT starts when the request reaches it, inside the
frontend's, which starts after the client sent it and ends before the client reads the
first chunk; so server <= frontend <= client TTFT, with no tolerance."""

from __future__ import annotations

import asyncio
from pathlib import Path

from loadgen.sim import SimConfig, running_simulator
from tests.support.dynamo_frontend import dynamo_frontend
from tests.support.procs import point, run_file, run_loadgen

MODEL = "deepseek-v4-sim"


async def test_the_frontend_is_a_fourth_timing_source(tmp_path: Path) -> None:
    config = SimConfig(model=MODEL, spec_tokens=2, step_fixed_ms=3.0, spin_us=0.0)
    async with (
        running_simulator(config) as worker,
        dynamo_frontend(worker.base_url) as frontend,
    ):
        results = tmp_path / "r"
        done = await asyncio.to_thread(
            run_loadgen,
            [
                "--base-url",
                frontend.base_url,
                "--server-metrics",
                frontend.base_url + "/metrics",
                "--server-metrics",
                worker.base_url + "/metrics",
                "--conc",
                "2",
                "--isl",
                "48",
                "--osl",
                "64",
                "--encoder",
                "raw",
                "--prompts-per-conc",
                "4",
                "--warmup-per-conc",
                "0",
                "--no-progress",
                "--results",
                str(results),
            ],
        )
    assert done.returncode == 0, done.stdout + done.stderr
    p = point(results, 2)
    assert p["completed"] == 8 and p["frontend_requests"] == 8
    assert p["server_requests"] == 8  # the worker's own count, not summed with the frontend's
    assert 0 < p["server_mean_ttft_ms"] <= p["frontend_mean_ttft_ms"] <= p["mean_ttft_ms"]
    assert p["frontend_mean_e2el_ms"] <= p["mean_e2el_ms"]
    assert p["frontend_mean_itl_per_token_ms"] > 0
    # the engine is found at the worker's URL, the frontend's series notwithstanding
    assert run_file(results)["server"]["engine"] == "vllm"


async def test_without_a_frontend_the_fields_are_null(tmp_path: Path) -> None:
    config = SimConfig(model=MODEL, step_fixed_ms=2.0, spin_us=0.0)
    async with running_simulator(config) as worker:
        results = tmp_path / "r"
        done = await asyncio.to_thread(
            run_loadgen,
            [
                "--base-url",
                worker.base_url,
                "--conc",
                "1",
                "--isl",
                "16",
                "--osl",
                "8",
                "--encoder",
                "raw",
                "--prompts-per-conc",
                "2",
                "--warmup-per-conc",
                "0",
                "--no-progress",
                "--results",
                str(results),
            ],
        )
    assert done.returncode == 0, done.stdout + done.stderr
    p = point(results, 1)
    assert p["server_requests"] == 2
    assert all(p[k] is None for k in p if k.startswith("frontend_"))
