"""How long --gpu-metrics scrapes hold the event loop that stamps chunks.

Serves `--exporters` dcgm-exporter-like pages of `--page-kb` KB (two GPUs' power and
energy lines among other fields, as a real dcgm-exporter page is mostly other fields)
from a separate process, samples them with loadgen's PowerSampler every `--interval` s
for `--seconds` s, and meanwhile measures how late a 1 ms ticker on the same loop wakes:
the lateness is what every chunk arriving meanwhile would have added to its stamp.
Prints the ticker's max and p99 lateness, the loop time lost per second (the lateness
summed, which a shared machine's scheduling also adds to: compare runs of one sitting)
and the samples taken.

    .venv/bin/python bench/gpu_scrape_loop.py --exporters 8 --page-kb 57
    .venv/bin/python bench/gpu_scrape_loop.py --exporters 1 --page-kb 5000

To compare with another version's sampler, put that checkout first on the path:
`PYTHONPATH=/path/to/other/checkout .venv/bin/python bench/gpu_scrape_loop.py ...`.

Measured (2 shared, loaded cores; three runs each, same sitting), max lateness:
8 x 57 KB: before (each page parsed as it arrived) 950-1633 ms (p99 11-579 ms), after
(GPU lines kept, parsed after the point) 18-59 ms (p99 6.0-7.2 ms, the machine's own
noise); 1 x 5 MB: before 8.1-8.7 s per scrape, after 62-154 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing
import time

import numpy as np
from aiohttp import web

from loadgen.client.gpu_metrics import PowerSampler


def page(size: int) -> str:
    lines = []
    total = 0
    i = 0
    while total < size:
        line = f'DCGM_FI_DEV_FIELD_{i % 97}{{gpu="{i % 2}",UUID="GPU-x",Hostname="h"}} {i}\n'
        lines.append(line)
        total += len(line)
        i += 1
    for gpu in range(2):
        labels = f'gpu="{gpu}",UUID="GPU-{gpu}",Hostname="h"'
        lines.append(f"DCGM_FI_DEV_POWER_USAGE{{{labels}}} 300.0\n")
        lines.append(f"DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{{{labels}}} 123456789\n")
    return "".join(lines)


def serve(size: int, ports: int, ready: multiprocessing.Queue[list[int]]) -> None:
    text = page(size)

    async def handle(_request: web.Request) -> web.Response:
        return web.Response(text=text, content_type="text/plain")

    async def main() -> None:
        found = []
        for _ in range(ports):
            app = web.Application()
            app.router.add_get("/metrics", handle)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            found.append(runner.addresses[0][1])
        ready.put(found)
        await asyncio.Event().wait()

    asyncio.run(main())


async def measure(
    urls: list[str], interval_s: float, seconds: float
) -> tuple[float, float, float, int]:
    sampler = PowerSampler(urls, interval_s)
    await sampler.start()
    late: list[float] = []
    end = time.perf_counter() + seconds
    while time.perf_counter() < end:
        due = time.perf_counter() + 0.001
        await asyncio.sleep(0.001)
        late.append(time.perf_counter() - due)
    series = await sampler.stop()
    samples = sum(len(s.samples) for s in series)
    lost_ms_per_s = sum(late) * 1e3 / seconds
    return float(np.percentile(late, 99)) * 1e3, max(late) * 1e3, lost_ms_per_s, samples


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--exporters", type=int, default=8)
    parser.add_argument("--page-kb", type=float, default=57.0)
    parser.add_argument("--interval", type=float, default=1.0)
    parser.add_argument("--seconds", type=float, default=10.0)
    args = parser.parse_args()
    ready: multiprocessing.Queue[list[int]] = multiprocessing.Queue()
    server = multiprocessing.Process(
        target=serve, args=(int(args.page_kb * 1024), args.exporters, ready), daemon=True
    )
    server.start()
    try:
        urls = [f"http://127.0.0.1:{port}/metrics" for port in ready.get(timeout=30)]
        p99, worst, lost, samples = asyncio.run(measure(urls, args.interval, args.seconds))
    finally:
        server.terminate()
        server.join()
    print(
        f"{args.exporters} exporters x {args.page_kb:g} KB every {args.interval:g} s for "
        f"{args.seconds:g} s: loop lateness max {worst:.1f} ms, p99 {p99:.2f} ms, "
        f"lost {lost:.1f} ms/s ({samples} samples)"
    )


if __name__ == "__main__":
    main()
