"""The sidecar tests' pieces (tests/sidecar/): a simulator to aim it at, the sidecar in
this process or as a real `loadgen serve` process, and calls to its HTTP API."""

from __future__ import annotations

import asyncio
import os
import re
import resource
import sys
import time
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from loadgen.sidecar.service import running_service
from loadgen.sidecar.settings import ServiceConfig
from loadgen.sim.server import SimConfig, running_simulator

MODEL = "sim-model"


# Small and fast: two points, a few requests each, MTP with 2 draft tokens.
QUICK = {
    "conc": "1,2",
    "isl": 64,
    "osl": 16,
    "prompts_per_conc": 2,
    "warmup_per_conc": 0,
    "encoder": "raw",
    "spec_tokens": 2,
}


# Long enough to still be running when the test cancels it.
LONG = {
    "conc": "2",
    "isl": 64,
    "osl": 100,
    "prompts_per_conc": 50,
    "warmup_per_conc": 0,
    "encoder": "raw",
}


@asynccontextmanager
async def simulator(step_ms: float = 2.0) -> AsyncIterator[str]:
    config = SimConfig(
        model=MODEL, spec_tokens=2, step_fixed_ms=step_ms, decode_token_us=1.0, prefill_token_us=0.1
    )
    async with running_simulator(config, host="127.0.0.1", port=0) as sim:
        yield str(sim.base_url)


@asynccontextmanager
async def sidecar(
    data_dir: Path, target: str, token: str | None = None, **settings: Any
) -> AsyncIterator[aiohttp.ClientSession]:
    config = ServiceConfig(
        target=target,
        model=MODEL,
        host="127.0.0.1",
        port=0,
        data_dir=data_dir,
        token=token,
        **settings,
    )
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with (
        running_service(config) as service,
        aiohttp.ClientSession(f"http://127.0.0.1:{service.port}", headers=headers) as client,
    ):
        yield client


async def call(
    client: aiohttp.ClientSession, method: str, path: str, body: Any = None
) -> tuple[int, Any]:
    data = None if body is None else (body if isinstance(body, bytes) else orjson.dumps(body))
    async with client.request(method, path, data=data) as response:
        raw = await response.read()
        try:
            return response.status, orjson.loads(raw)
        except orjson.JSONDecodeError:
            return response.status, raw.decode()


async def wait_for(
    client: aiohttp.ClientSession,
    run_id: str,
    *,
    states: set[str],
    timeout_s: float = 60.0,
    min_requests: int = 0,
) -> dict[str, Any]:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        status, run = await call(client, "GET", f"/v1/runs/{run_id}")
        assert status == 200
        if run["state"] in states and run["progress"]["requests_done"] >= min_requests:
            return dict(run)
        assert run["state"] in {"running", *states}, run
        await asyncio.sleep(0.1)
    raise AssertionError(f"run {run_id} not in {states} after {timeout_s}s: {run}")


def all_bytes_under(directory: Path) -> bytes:
    return b"\n".join(
        p.read_bytes() for p in directory.rglob("*") if p.is_file() and not p.is_symlink()
    )


PROCESS_TOKEN = "s3cret-token-for-limits"


ADDRESS_SPACE = 3 << 30  # the sidecar's safety net: far above its ~0.2 GB


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (ADDRESS_SPACE, ADDRESS_SPACE))


def rss_bytes(pid: int, field: str) -> int:
    """VmRSS (now) or VmHWM (the peak) of a process, in bytes."""
    status = Path(f"/proc/{pid}/status").read_text()
    match = re.search(rf"^{field}:\s+(\d+) kB$", status, re.MULTILINE)
    assert match, status
    return int(match[1]) * 1024


@asynccontextmanager
async def sidecar_process(
    data_dir: Path, target: str = "http://127.0.0.1:9", model: str = "m"
) -> AsyncIterator[tuple[int, aiohttp.ClientSession]]:
    """`loadgen serve` with a token, aimed by default at a port nothing listens on (no
    run gets as far as sending): its pid and a client carrying the token."""
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-m",
        "loadgen",
        "serve",
        "--target",
        target,
        "--model",
        model,
        "--listen",
        "127.0.0.1:0",
        "--data-dir",
        str(data_dir),
        stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "LOADGEN_API_TOKEN": PROCESS_TOKEN},
        preexec_fn=_limit_memory,
    )
    try:
        assert process.stderr is not None
        port = None
        for _ in range(50):  # the "listening" line, after any warnings
            line = await asyncio.wait_for(process.stderr.readline(), 60)
            port = re.search(rb"listening on http://127\.0\.0\.1:(\d+)", line)
            if port or not line:
                break
        assert port, "the sidecar never said where it listens"
        headers = {"Authorization": f"Bearer {PROCESS_TOKEN}"}
        async with aiohttp.ClientSession(
            f"http://127.0.0.1:{int(port[1])}", headers=headers
        ) as client:
            yield process.pid, client
    finally:
        if process.returncode is None:
            process.kill()
        await process.wait()


async def post(client: aiohttp.ClientSession, body: bytes) -> tuple[int, Any]:
    async with client.post("/v1/runs", data=body) as response:
        return response.status, orjson.loads(await response.read())


async def healthz_meanwhile(client: aiohttp.ClientSession, stop: asyncio.Event) -> list[float]:
    """/healthz every 50 ms until `stop`: how long each answer took (each must be 200)."""
    took = []
    while not stop.is_set():
        started = asyncio.get_running_loop().time()
        async with client.get("/healthz", timeout=aiohttp.ClientTimeout(total=5)) as response:
            assert response.status == 200
            assert (await response.json())["status"] == "ok"
        took.append(asyncio.get_running_loop().time() - started)
        await asyncio.sleep(0.05)
    return took
