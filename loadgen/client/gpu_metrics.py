"""Sampling GPU exporters (`--gpu-metrics URL`) every `--gpu-metrics-interval` during a point.

Each URL has its own task in one TaskGroup, so an exporter that stops answering delays
none of the others; each scrape is bounded by a 2 s timeout and a failed one is kept as
a sample without readings (metrics/energy.py marks the point). `start`
returns once every URL has been sampled once and `stop` samples every URL once more, so
the samples bracket the measured window (first send to last completion) by construction.
Scrapes run on a session of their own (client/http_session.py: no decompression,
same-origin redirects, a capped body), beside the server's /metrics scrapes.

While the point measures, each answer is kept as its lines of the GPU series
(metrics/gpu_power.gpu_lines, a C-speed scan) and parsed only when the series are asked
for, after the point: parsing a dcgm-exporter page costs milliseconds of Python, which on
the event loop would delay the stamps of every chunk arriving meanwhile (as the server
series' scrapes, client/server_series.py, wait too).
"""

from __future__ import annotations

import asyncio
import bisect
import contextlib
import os
import stat
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
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
    GpuReading,
    PowerCsvColumns,
    PowerCsvError,
    gpu_ids,
    gpu_lines,
    parse_gpu_metrics,
    power_csv_columns,
    power_csv_rows,
)
from loadgen.metrics.throughput import measured_window
from loadgen.records import RequestRecord
from loadgen.wording import reason_of

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
    """Before the sweep: one line naming every URL that has no GPU power series, or GPUs
    (by UUID) two URLs both serve, which would count them twice (a URL given twice is
    refused with the settings: config/telemetry.py)."""
    async with open_session(timeout_s=PREFLIGHT_SCRAPE_S, max_connections=len(urls)) as session:

        async def problem(url: str) -> str | dict[str, GpuReading]:
            try:
                readings = parse_gpu_metrics(await fetch_metrics_text(session, url))
            except (aiohttp.ClientError, OSError, MetricsUrlError, TimeoutError) as exc:
                return f"{redact_url(url)} ({reason_of(exc)})"
            except GpuMetricsParseError:
                return f"{redact_url(url)} (not Prometheus text)"
            return readings or f"{redact_url(url)} (no {' or '.join(POWER_NAMES)})"

        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(problem(url)) for url in urls]
    answers = [task.result() for task in tasks]
    failed = [p for p in answers if isinstance(p, str)]
    if failed:
        raise GpuMetricsUrlError(
            f"--gpu-metrics: {len(failed)} of {len(urls)} URLs serve no GPU power metrics: "
            f"{'; '.join(failed)}; point it at dcgm-exporter (:9400/metrics) or AMD's "
            "device-metrics-exporter (:5000/metrics)"
        )
    _check_distinct_gpus(urls, [a for a in answers if not isinstance(a, str)])


def _check_distinct_gpus(urls: Sequence[str], readings: Sequence[dict[str, GpuReading]]) -> None:
    """One exporter under two names (localhost and 127.0.0.1, a node's two addresses)
    serves the same GPUs: their UUIDs say so."""
    where: dict[str, str] = {}
    for url, gpus in zip(urls, readings, strict=True):
        for reading in gpus.values():
            if reading.uuid is None:
                continue
            first = where.setdefault(reading.uuid, url)
            if first != url:
                raise GpuMetricsUrlError(
                    f"--gpu-metrics: {redact_url(first)} and {redact_url(url)} both serve "
                    f"GPU {reading.uuid}: the same exporter twice would count its GPUs "
                    "twice; name each exporter once"
                )


@dataclass(frozen=True, slots=True)
class RawSample:
    """One scrape as it arrived: its GPU lines (gpu_lines), None when the scrape failed."""

    mono_ns: int
    unix_ns: int
    lines: str | None


def parse_sample(raw: RawSample) -> PowerSample:
    """After the point: the scrape's readings (None when it failed or does not parse)."""
    readings: dict[str, GpuReading] | None = None
    if raw.lines is not None:
        with contextlib.suppress(GpuMetricsParseError):
            readings = parse_gpu_metrics(raw.lines)
    return PowerSample(raw.mono_ns, raw.unix_ns, readings)


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
        self.samples: dict[str, list[RawSample]] = {url: [] for url in self.urls}
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
        """Parsed here, once the point is over (never while it measures)."""
        return [
            PowerSeries(redact_url(url), tuple(parse_sample(raw) for raw in self.samples[url]))
            for url in self.urls
        ]

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
        lines: str | None
        try:
            async with asyncio.timeout(self._timeout_s):
                text = await fetch_metrics_text(self._session, url)
        except (aiohttp.ClientError, OSError, MetricsUrlError, TimeoutError):
            lines = None
        else:
            lines = gpu_lines(text)
        after = self.clock()
        # the exporter read its GPUs somewhere between send and answer: the midpoint
        mid = (before + after) // 2
        self.samples[url].append(RawSample(mid, wall + (mid - before), lines))


CSV_POLL_S = 0.05
MAX_CSV_READ_BYTES = 64 << 20  # per point: 18 h of nvidia-smi at 500 ms on 8 GPUs
CSV_MARGIN_S = 10.0  # rows kept around a window (metrics/energy.csv_power_series)


def _written_since(path: Path, unix_s: float) -> bool:
    try:
        return path.stat().st_mtime > unix_s
    except OSError:
        return True  # gone: reading it says so


class PowerCsvFileError(UsageError):
    """--gpu-power-csv names no readable telemetry CSV."""


def _not_a_file(path: Path) -> str:
    return (
        f"--gpu-power-csv {path}: not a regular file (a FIFO, device or directory "
        "cannot be read back to a point's window); let the recorder write a file "
        "(nvidia-smi ... -f FILE)"
    )


def check_power_csv(path: Path) -> None:
    """Before the sweep: a regular file (a FIFO would block the read, /dev/zero never
    ends) whose header has the columns energy needs."""
    try:
        regular = stat.S_ISREG(path.stat().st_mode)
        if not regular:
            raise PowerCsvFileError(_not_a_file(path))
        with path.open(encoding="utf-8", errors="replace") as fh:
            header = fh.readline(64 << 10)
    except OSError as exc:
        raise PowerCsvFileError(
            f"--gpu-power-csv {path}: {exc.strerror or exc}; start the "
            "recorder (nvidia-smi ... -f FILE) before loadgen"
        ) from None
    try:
        power_csv_columns(header)
    except PowerCsvError as exc:
        raise PowerCsvFileError(
            f"--gpu-power-csv {path}: {exc}; record it with nvidia-smi "
            "--query-gpu=timestamp,index,power.draw --format=csv"
        ) from None


class PowerCsvTail:
    """--gpu-power-csv read as its recorder appends: each point reads only the bytes
    written since the previous one (at most MAX_CSV_READ_BYTES), so a sweep reads the
    file once, and keeps only the rows a later window can still use."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.partial = ""  # a last line the recorder had not finished
        self.columns: PowerCsvColumns | None = None
        self.rows: dict[str, list[tuple[float, float]]] = {}

    def read_new(self) -> None:
        """Blocking (run it in a thread): the rows appended since the last read. Raises
        OSError, PowerCsvError."""
        fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as fh:
            info = os.fstat(fh.fileno())
            if not stat.S_ISREG(info.st_mode):  # swapped for a FIFO since the check
                raise OSError(_not_a_file(self.path))
            if info.st_size < self.offset:  # truncated or replaced: read it anew
                self.offset, self.partial, self.columns, self.rows = 0, "", None, {}
            fh.seek(self.offset)
            data = fh.read(MAX_CSV_READ_BYTES)
        self.offset += len(data)
        text = self.partial + data.decode("utf-8", errors="replace")
        complete, _, self.partial = text.rpartition("\n")
        if self.columns is None:
            header, _, complete = complete.partition("\n")
            self.columns = power_csv_columns(header)
        for gpu, rows in power_csv_rows(self.columns, complete).items():
            self.rows.setdefault(gpu, []).extend(rows)

    def rows_after(self, unix_s: float) -> dict[str, list[tuple[float, float]]]:
        """Every GPU's rows in time order, dropping for good those before `unix_s`."""
        for gpu, rows in self.rows.items():
            rows.sort()
            self.rows[gpu] = rows[bisect.bisect_left(rows, (unix_s,)) :]
        return {gpu: self.rows[gpu] for gpu in gpu_ids(self.rows)}


async def read_power_csv(tail: PowerCsvTail, *, wait_s: float = MAX_CSV_WAIT_S) -> bool:
    """After the last completion: the rows written up to once its recorder wrote past
    now (at most `wait_s` later, so a row brackets the window's end); False when it
    cannot be read."""
    now = time.time()
    for _ in range(int(wait_s / CSV_POLL_S)):  # polled: a file has no event to wait on
        if await asyncio.to_thread(_written_since, tail.path, now):
            break
        await asyncio.sleep(CSV_POLL_S)
    try:
        await asyncio.to_thread(tail.read_new)
    except (OSError, PowerCsvError):
        return False
    return True


async def point_power_csv(
    tail: PowerCsvTail, records: Sequence[RequestRecord]
) -> list[PowerSeries]:
    """A point's series from --gpu-power-csv, read once its recorder is past the end."""
    readable = await read_power_csv(tail)
    starts = [(r.start_ns, r.sent_unix) for r in records]
    window_ns = measured_window(records)
    offset = mono_to_unix_ns(starts)
    if offset is None or window_ns is None:
        return []
    source = str(tail.path)
    if not readable:  # one failed sample: exporter_unanswered
        return [PowerSeries(source, [PowerSample(window_ns[1], window_ns[1] + offset, None)])]
    # a later window starts after this one ends: rows before its margin serve none
    rows = tail.rows_after((window_ns[0] + offset) / 1e9 - CSV_MARGIN_S)
    return csv_power_series(rows, source, offset, window_ns, CSV_MARGIN_S)
