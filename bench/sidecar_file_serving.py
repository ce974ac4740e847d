"""How fast does the sidecar serve a result file, now that it streams from a descriptor
opened without following links instead of aiohttp's FileResponse (sendfile)?

Writes one file of --mb MiB (a stand-in for a large requests_conc_N.jsonl) into a run's
results directory, then downloads it --repeat times over 127.0.0.1 from
`GET /v1/runs/{id}/files/{name}` and, as the baseline, from a bare aiohttp app serving
the same path with `web.FileResponse`. Prints MiB/s (best and median of the repeats).

    .venv/bin/python bench/sidecar_file_serving.py --mb 256 --repeat 5

Figures on a shared 2-core machine are noisy; the ratio is what matters.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import statistics
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import aiohttp
import orjson
from aiohttp import web

from loadgen.sidecar.service import running_service
from loadgen.sidecar.settings import ServiceConfig

RUN_ID = "20260101T000000Z-abcdef"


async def download(url: str) -> int:
    size = 0
    async with aiohttp.ClientSession() as session, session.get(url) as response:
        assert response.status == 200, response.status
        async for chunk in response.content.iter_chunked(1 << 20):
            size += len(chunk)
    return size


async def timed(fetch: Callable[[], Awaitable[int]], expected: int, repeat: int) -> list[float]:
    rates = []
    for _ in range(repeat):
        start = time.perf_counter()
        assert await fetch() == expected
        rates.append(expected / (1 << 20) / (time.perf_counter() - start))
    return rates


def prepare(data_dir: Path, mb: int) -> Path:
    run_dir = data_dir / "runs" / RUN_ID
    (run_dir / "results").mkdir(parents=True)
    (run_dir / "run.json").write_bytes(
        orjson.dumps({"id": RUN_ID, "state": "succeeded", "created_unix": 1.0, "options": {}})
    )
    path = run_dir / "results" / "requests_conc_512.jsonl"
    with path.open("wb") as f:
        for _ in range(mb):
            f.write(os.urandom(1 << 20))
    return path


async def main(mb: int, repeat: int) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        path = prepare(Path(tmp), mb)
        size = path.stat().st_size
        config = ServiceConfig(target="http://127.0.0.1:9", model="m", port=0, data_dir=Path(tmp))
        async with running_service(config) as service:
            url = f"http://127.0.0.1:{service.port}/v1/runs/{RUN_ID}/files/{path.name}"
            sidecar = await timed(lambda: download(url), size, repeat)

        async def file_response(_request: web.Request) -> web.FileResponse:
            return web.FileResponse(path)

        app = web.Application()
        app.router.add_get("/f", file_response)
        runner = web.AppRunner(app, access_log=None)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = runner.addresses[0][1]
        try:
            baseline = await timed(lambda: download(f"http://127.0.0.1:{port}/f"), size, repeat)
        finally:
            await runner.cleanup()
    for name, rates in (("sidecar (fd, no links)", sidecar), ("FileResponse", baseline)):
        print(
            f"{name:24s} best {max(rates):8.0f} MiB/s  median {statistics.median(rates):8.0f}"
            f" MiB/s  ({mb} MiB x {repeat})"
        )


if __name__ == "__main__":
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--mb", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    asyncio.run(main(args.mb, args.repeat))
