"""Sampling GPU exporters (`--gpu-metrics URL`) every `--gpu-metrics-interval` during a point.

Each URL has its own task in one TaskGroup, so an exporter that stops answering delays
none of the others; each scrape is bounded by a timeout below the interval and a failed
one is kept as a sample without readings (metrics/energy.py marks the point). `start`
returns once every URL has been sampled once and `stop` samples every URL once more, so
the samples bracket the measured window (first send to last completion) by construction.
Scrapes run on a session of their own, beside the server's /metrics scrapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence

import aiohttp

from loadgen.client.server_metrics import MetricsUrlError, fetch_metrics_text, metrics_urls
from loadgen.config.redact import redact_url
from loadgen.metrics.energy import PowerSample, PowerSeries
from loadgen.metrics.gpu_power import POWER_NAMES, GpuMetricsParseError, parse_gpu_metrics

MAX_SCRAPE_S = 2.0
EMBEDDED_SIM = "sim"  # --gpu-metrics sim: the embedded simulator's (--sim) /gpu/metrics


def gpu_metrics_urls(given: Sequence[str], base_url: str) -> tuple[str, ...]:
    """The URLs to sample: `sim` is the target's /gpu/metrics, a bare root gets /metrics."""
    urls = [base_url.rstrip("/") + "/gpu/metrics" if url == EMBEDDED_SIM else url
            for url in given]
    return metrics_urls(urls, base_url)


class GpuMetricsUrlError(MetricsUrlError):
    """A --gpu-metrics URL does not serve a known GPU exporter's metrics."""


async def check_gpu_metrics_urls(urls: Sequence[str]) -> None:
    """Before the sweep: one line naming every URL that has no GPU power series."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=5.0)) as session:
        async def problem(url: str) -> str | None:
            try:
                readings = parse_gpu_metrics(await fetch_metrics_text(session, url))
            except (aiohttp.ClientError, OSError, MetricsUrlError, TimeoutError) as exc:
                return f"{redact_url(url)} ({str(exc) or type(exc).__name__})"
            except GpuMetricsParseError:
                return f"{redact_url(url)} (not Prometheus text)"
            return None if readings else f"{redact_url(url)} (no {' or '.join(POWER_NAMES)})"

        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(problem(url)) for url in urls]
    failed = [p for task in tasks if (p := task.result()) is not None]
    if failed:
        raise GpuMetricsUrlError(
            f"--gpu-metrics: {len(failed)} of {len(urls)} URLs serve no GPU power metrics: "
            f"{'; '.join(failed)}; point it at dcgm-exporter (:9400/metrics) or AMD's "
            "device-metrics-exporter (:5000/metrics)")


class PowerSampler:
    """Samples every URL at `interval_s` from `start` to `stop`."""

    def __init__(self, urls: Sequence[str], interval_s: float, *,
                 clock: Callable[[], int] = time.perf_counter_ns,
                 wall: Callable[[], int] = time.time_ns) -> None:
        self.urls = tuple(urls)
        self.interval_s = interval_s
        self.clock, self.wall = clock, wall
        self.samples: dict[str, list[PowerSample]] = {url: [] for url in self.urls}
        self._timeout_s = min(MAX_SCRAPE_S, max(0.05, interval_s * 0.9))
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._interrupted = False

    async def start(self) -> None:
        self._session = aiohttp.ClientSession()
        await self._sample_all()
        self._task = asyncio.get_running_loop().create_task(self._run(),
                                                            name="loadgen-gpu-metrics")

    async def stop(self) -> list[PowerSeries]:
        """After the last completion: one more sample of every URL, then the series."""
        await self._cancel()
        try:
            await self._sample_all()
        finally:
            await self._close()
        return self.series()

    def cancel(self) -> None:
        """Interrupted: no more samples (the session closes with the task)."""
        self._interrupted = True
        if self._task is not None:
            self._task.cancel()

    def series(self) -> list[PowerSeries]:
        return [PowerSeries(redact_url(url), tuple(self.samples[url])) for url in self.urls]

    async def _cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
            self._task = None

    async def _close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _sample_all(self) -> None:
        async with asyncio.TaskGroup() as group:
            for url in self.urls:
                group.create_task(self._sample(url))

    async def _run(self) -> None:
        try:
            async with asyncio.TaskGroup() as group:
                for url in self.urls:
                    group.create_task(self._every_interval(url))
        finally:
            if self._interrupted:
                await self._close()

    async def _every_interval(self, url: str) -> None:
        """On an absolute schedule: a slow scrape does not stretch the next interval."""
        interval_ns = int(self.interval_s * 1e9)
        due = self.clock() + interval_ns
        while True:
            await asyncio.sleep(max(0.0, (due - self.clock()) / 1e9))
            await self._sample(url)
            due = max(due + interval_ns, self.clock())

    async def _sample(self, url: str) -> None:
        assert self._session is not None
        before = self.clock()
        wall = self.wall()
        try:
            async with asyncio.timeout(self._timeout_s):
                text = await fetch_metrics_text(self._session, url)
            readings = parse_gpu_metrics(text)
        except (aiohttp.ClientError, OSError, MetricsUrlError, TimeoutError,
                GpuMetricsParseError):
            readings = None
        after = self.clock()
        # the exporter read its GPUs somewhere between send and answer: the midpoint
        mid = (before + after) // 2
        self.samples[url].append(PowerSample(mid, wall + (mid - before), readings))
