"""Sampling GPU exporters (`--gpu-metrics URL`) every `--gpu-metrics-interval` during a point.

Each URL has its own task in one TaskGroup, so an exporter that stops answering delays
none of the others; each scrape is bounded by a 2 s timeout and a failed one is kept as
a sample without readings (metrics/energy.py marks the point). `start`
returns once every URL has been sampled once and `stop` samples every URL once more, so
the samples bracket the measured window (first send to last completion) by construction.
Scrapes run on a session of their own (client/http_session.py: no decompression,
same-origin redirects, a capped body), beside the server's /metrics scrapes.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable, Sequence
from pathlib import Path

import aiohttp

from loadgen.client.http_session import open_session
from loadgen.client.server_metrics import MetricsUrlError, fetch_metrics_text, metrics_urls
from loadgen.config.redact import redact_url
from loadgen.errors import UsageError
from loadgen.metrics.energy import PowerSample, PowerSeries, csv_power_series, mono_to_unix_ns
from loadgen.metrics.gpu_power import (
    POWER_NAMES,
    GpuMetricsParseError,
    PowerCsvError,
    parse_gpu_metrics,
    parse_power_csv,
)
from loadgen.metrics.throughput import measured_window
from loadgen.records import RequestRecord

MAX_SCRAPE_S = 2.0
PREFLIGHT_SCRAPE_S = 5.0
MAX_CSV_WAIT_S = 3.0  # a recorder sampling at InferenceX's largest valid gap has written
EMBEDDED_SIM = "sim"  # --gpu-metrics sim: the embedded simulator's (--sim) /gpu/metrics


def gpu_metrics_urls(given: Sequence[str], base_url: str) -> tuple[str, ...]:
    """The URLs to sample: `sim` is the target's /gpu/metrics, a bare root gets /metrics."""
    urls = [base_url.rstrip("/") + "/gpu/metrics" if url == EMBEDDED_SIM else url for url in given]
    return metrics_urls(urls, base_url)


class GpuMetricsUrlError(MetricsUrlError):
    """A --gpu-metrics URL does not serve a known GPU exporter's metrics."""


async def check_gpu_metrics_urls(urls: Sequence[str]) -> None:
    """Before the sweep: one line naming every URL that has no GPU power series."""
    async with open_session(timeout_s=PREFLIGHT_SCRAPE_S, max_connections=len(urls)) as session:

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
            "device-metrics-exporter (:5000/metrics)"
        )


class PowerSampler:
    """Samples every URL at `interval_s` from `start` to `stop`."""

    def __init__(
        self,
        urls: Sequence[str],
        interval_s: float,
        *,
        clock: Callable[[], int] = time.perf_counter_ns,
        wall: Callable[[], int] = time.time_ns,
    ) -> None:
        self.urls = tuple(urls)
        self.interval_s = interval_s
        self.clock, self.wall = clock, wall
        self.samples: dict[str, list[PowerSample]] = {url: [] for url in self.urls}
        # not tied to the interval: a slow answer delays only its URL's next sample (the
        # schedule is absolute), while a timeout marks the point exporter_unanswered
        self._timeout_s = MAX_SCRAPE_S
        self._session: aiohttp.ClientSession | None = None
        self._task: asyncio.Task[None] | None = None
        self._interrupted = False

    async def start(self) -> None:
        self._session = open_session(timeout_s=self._timeout_s, max_connections=len(self.urls))
        try:
            await self._sample_all()
        except BaseException:  # interrupted before the point began: no session left open
            await self._close()
            raise
        self._task = asyncio.get_running_loop().create_task(self._run(), name="loadgen-gpu-metrics")

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
        except (aiohttp.ClientError, OSError, MetricsUrlError, TimeoutError, GpuMetricsParseError):
            readings = None
        after = self.clock()
        # the exporter read its GPUs somewhere between send and answer: the midpoint
        mid = (before + after) // 2
        self.samples[url].append(PowerSample(mid, wall + (mid - before), readings))


CSV_POLL_S = 0.05


def _written_since(path: Path, unix_s: float) -> bool:
    try:
        return path.stat().st_mtime > unix_s
    except OSError:
        return True  # gone: reading it says so


class PowerCsvFileError(UsageError):
    """--gpu-power-csv names no readable telemetry CSV."""


def check_power_csv(path: Path) -> None:
    """Before the sweep: the file is there and its header has the columns energy needs."""
    try:
        with path.open(encoding="utf-8", errors="replace") as fh:
            header = fh.readline()
    except OSError as exc:
        raise PowerCsvFileError(
            f"--gpu-power-csv {path}: {exc.strerror or exc}; start the "
            "recorder (nvidia-smi ... -f FILE) before loadgen"
        ) from None
    try:
        parse_power_csv(header)
    except PowerCsvError as exc:
        raise PowerCsvFileError(
            f"--gpu-power-csv {path}: {exc}; record it with nvidia-smi "
            "--query-gpu=timestamp,index,power.draw --format=csv"
        ) from None


async def read_power_csv(path: Path, *, wait_s: float = MAX_CSV_WAIT_S) -> str | None:
    """After the last completion: the file once its recorder wrote past now (at most
    `wait_s` later, so a row brackets the window's end), None when it cannot be read."""
    now = time.time()
    for _ in range(int(wait_s / CSV_POLL_S)):  # polled: a file has no event to wait on
        if await asyncio.to_thread(_written_since, path, now):
            break
        await asyncio.sleep(CSV_POLL_S)
    try:
        return await asyncio.to_thread(path.read_text, encoding="utf-8", errors="replace")
    except OSError:
        return None


async def point_power_csv(path: Path, records: Sequence[RequestRecord]) -> list[PowerSeries]:
    """A point's series from --gpu-power-csv, read once its recorder is past the end."""
    return power_csv_series(
        await read_power_csv(path),
        str(path),
        [(r.start_ns, r.sent_unix) for r in records],
        measured_window(records),
    )


def power_csv_series(
    text: str | None,
    source: str,
    starts: Sequence[tuple[int, float]],
    window_ns: tuple[int, int] | None,
) -> list[PowerSeries]:
    """The point's --gpu-power-csv rows as series on the monotonic clock; a file that
    could not be read or parsed is one failed sample (exporter_unanswered)."""
    offset = mono_to_unix_ns(starts)
    if offset is None or window_ns is None:
        return []
    rows = None
    if text is not None:
        with contextlib.suppress(PowerCsvError):
            rows = parse_power_csv(text)
    if rows is None:
        return [PowerSeries(source, [PowerSample(window_ns[1], window_ns[1] + offset, None)])]
    return csv_power_series(rows, source, offset, window_ns)
