"""Scraping the servers' Prometheus /metrics: the target's, or every `--server-metrics` URL.

Behind a router or a Dynamo frontend the engines' counters are not on the target: each
vLLM worker exposes its own (a Dynamo worker on its system port). Each URL is scraped
before and after a point; the sum over URLs (and engines) feeds the acceptance and
server-latency cross-checks, and each URL's own snapshot is kept for per-worker figures.
During the measured phase a watcher reads only the KV-cache and queue gauges of each URL
every few seconds (a line scan, not a full parse, so the client's stamping loop barely
notices), because their value after a point (an idle server) says nothing.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit

import aiohttp

from loadgen.client.deadlines import unanswered
from loadgen.client.http_session import MAX_PAGE_BYTES, read_capped
from loadgen.config.telemetry import metrics_source
from loadgen.errors import ServerError
from loadgen.metrics.engines import VLLM, EngineDialect
from loadgen.metrics.server import (
    WATCHED_GAUGES,
    MetricsParseError,
    ServerSnapshot,
    gauge_samples,
    merge_snapshots,
    parse_metrics,
)
from loadgen.wording import printable, reason_of

WATCH_INTERVAL_S = 2.0


class MetricsUrlError(ServerError):
    """A --server-metrics URL does not serve Prometheus metrics."""


def metrics_urls(server_metrics: Sequence[str], base_url: str) -> tuple[str, ...]:
    """The URLs to scrape: `--server-metrics` (a bare root gets /metrics) or the target's."""
    return tuple(metrics_roles(server_metrics, base_url))


def metrics_roles(server_metrics: Sequence[str], base_url: str) -> dict[str, str]:
    """Each URL to scrape (as metrics_urls spells it) -> its role: `--server-metrics
    ROLE=URL`, a worker's when not said; the target's own is a worker's."""
    if not server_metrics:
        return {base_url.rstrip("/") + "/metrics": "worker"}
    roles: dict[str, str] = {}
    for entry in server_metrics:
        role, url = metrics_source(entry)
        path = urlsplit(url).path
        roles[url if path not in ("", "/") else url.rstrip("/") + "/metrics"] = role
    return roles


@dataclass(frozen=True, slots=True)
class Scrape:
    """One scrape of every URL (None where a URL failed)."""

    each: Mapping[str, ServerSnapshot | None] = field(default_factory=dict)

    @property
    def total(self) -> ServerSnapshot | None:
        """Summed over URLs; None when any URL failed (a partial sum would be wrong)."""
        return merge_snapshots(list(self.each.values()))


async def fetch_metrics_text(session: aiohttp.ClientSession, url: str) -> str:
    async with session.get(url) as response:
        if response.status != 200:
            raise MetricsUrlError(f"HTTP {response.status}")
        return (await read_capped(response, MAX_PAGE_BYTES)).decode("utf-8", "replace")


def warn(message: str) -> None:
    print(f"loadgen: WARNING: {printable(message)}", file=sys.stderr)


async def scrape_url(
    session: aiohttp.ClientSession,
    url: str,
    *,
    on_warning: Callable[[str], None] = warn,
    dialect: EngineDialect = VLLM,
) -> ServerSnapshot | None:
    """During a run: never raises. No usable metrics is None; a URL that stops answering
    costs the point its server-side fields (null), with a warning, never the sweep. The
    snapshot is under vLLM's names (`dialect`, metrics/engines.py)."""
    try:
        return dialect.canonical(parse_metrics(await fetch_metrics_text(session, url)))
    except (ValueError, MetricsUrlError):
        return None
    except TimeoutError:
        problem = unanswered(session, url)
    except (aiohttp.ClientError, OSError) as exc:
        problem = f"GET {url} failed ({type(exc).__name__}: {exc})"
    on_warning(f"{problem}: this point's server-side (server_*) fields will be null")
    return None


async def scrape_all(
    session: aiohttp.ClientSession, urls: Sequence[str], dialect: EngineDialect = VLLM
) -> Scrape:
    async with asyncio.TaskGroup() as group:
        tasks = {url: group.create_task(scrape_url(session, url, dialect=dialect)) for url in urls}
    return Scrape({url: task.result() for url, task in tasks.items()})


async def check_metrics_urls(session: aiohttp.ClientSession, urls: Sequence[str]) -> Scrape:
    """Preflight: scrape each URL once; one line naming every URL that failed and why."""

    async def one(url: str) -> ServerSnapshot | str:
        try:
            return parse_metrics(await fetch_metrics_text(session, url))
        except MetricsParseError:
            return "not Prometheus text"
        except (aiohttp.ClientError, OSError, MetricsUrlError) as exc:
            return reason_of(exc)

    async with asyncio.TaskGroup() as group:
        tasks = {url: group.create_task(one(url)) for url in urls}
    results = {url: task.result() for url, task in tasks.items()}
    failed = [f"{url} ({why})" for url, why in results.items() if isinstance(why, str)]
    if failed:
        raise MetricsUrlError(
            f"--server-metrics: {len(failed)} of {len(urls)} URLs serve no "
            f"Prometheus metrics: {'; '.join(failed)}; check each worker's "
            "metrics port"
        )
    return Scrape({url: snap for url, snap in results.items() if not isinstance(snap, str)})


class GaugeWatch:
    """Samples WATCHED_GAUGES of each URL every `interval_s` until stopped."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        urls: Sequence[str],
        interval_s: float | None = None,
        dialect: EngineDialect = VLLM,
    ) -> None:
        self.session, self.urls = session, tuple(urls)
        # the engine's gauge names -> vLLM's; None: vLLM's own (its fast line filter)
        self.names = None if dialect is VLLM else dialect.gauge_names()
        self.interval_s = WATCH_INTERVAL_S if interval_s is None else interval_s
        self.samples: dict[str, dict[str, list[float]]] = {
            url: {name: [] for name in WATCHED_GAUGES} for url in self.urls
        }
        # perf_counter_ns of each sample, beside it (the time slices place them)
        self.times: dict[str, dict[str, list[int]]] = {
            url: {name: [] for name in WATCHED_GAUGES} for url in self.urls
        }
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._run())

    def cancel(self) -> None:
        if self._task is not None:
            self._task.cancel()

    async def stop(self) -> dict[str, dict[str, list[float]]]:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        return self.samples

    async def _run(self) -> None:
        while True:
            for url in self.urls:
                with contextlib.suppress(aiohttp.ClientError, OSError, MetricsUrlError):
                    text = await fetch_metrics_text(self.session, url)
                    values = gauge_samples(text, self.names)
                    now = time.perf_counter_ns()
                    for name, value in values.items():
                        self.samples[url][name].append(value)
                        self.times[url][name].append(now)
            await asyncio.sleep(self.interval_s)
