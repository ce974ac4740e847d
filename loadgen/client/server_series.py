"""The servers' whole /metrics text, read every `interval_s` during a measured phase, for
the server series of `--aiperf-artifacts` (metrics/server_series.py turns them into series).

Only the body is kept here, stamped when it arrived: parsing a vLLM /metrics page costs
milliseconds of Python, which on the event loop would delay the stamps of every chunk
arriving meanwhile, so it waits until the point is over.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

import aiohttp

from loadgen.client.server_metrics import MetricsUrlError, fetch_metrics_text
from loadgen.metrics.server_series import ScrapeText


class SeriesWatch:
    """Keeps every scrape of every URL, from start() (one at once) until stop() (one more,
    so the series end where the point's counters are read)."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        urls: Sequence[str],
        interval_s: float,
        clock: Callable[[], int] = time.perf_counter_ns,
    ) -> None:
        self.session, self.urls, self.interval_s = session, tuple(urls), interval_s
        self.clock = clock
        self.scrapes: list[ScrapeText] = []
        self._task: asyncio.Task[None] | None = None

    async def start(self) -> None:
        """The first scrape now, then one every interval_s in the background."""
        await self._sample()
        self._task = asyncio.get_running_loop().create_task(self._run())

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def stop(self) -> list[ScrapeText]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None
            await self._sample()
        return self.scrapes

    async def _sample(self) -> None:
        async with asyncio.TaskGroup() as group:
            for url in self.urls:
                group.create_task(self._one(url))

    async def _one(self, url: str) -> None:
        # a URL that does not answer leaves a gap in its series (its slices span it)
        with contextlib.suppress(aiohttp.ClientError, OSError, MetricsUrlError, TimeoutError):
            text = await fetch_metrics_text(self.session, url)
            self.scrapes.append(ScrapeText(url, self.clock(), text))

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            await self._sample()
