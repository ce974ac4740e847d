"""/metrics over HTTP: the handler, the server for --metrics-port, and shard labels."""

from __future__ import annotations

import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.metrics_core import Metric

from loadgen.sinks.guarded_http import (
    DEFAULT_LIMITS,
    ServerLimits,
    guarded_app,
    start_guarded,
)
from loadgen.sinks.prometheus.instruments import LoadgenMetrics
from loadgen.sinks.prometheus.observer import MetricsObserver

log = logging.getLogger("loadgen.metrics")


def metrics_handler(
    registry: CollectorRegistry,
) -> Callable[[web.Request], Awaitable[web.Response]]:
    """An aiohttp handler serving `registry` in the Prometheus text format."""

    async def handle(request: web.Request) -> web.Response:
        return web.Response(
            body=generate_latest(registry), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    return handle


@dataclass(frozen=True, slots=True)
class MetricsServer:
    host: str
    port: int

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}/metrics"


class WithLabels:
    """Every series of `registry` with `labels` added: a shard's `shard` label, so that
    Prometheus keeps the shards' series apart and a dashboard sums them (`sum by (le)`)."""

    def __init__(self, registry: CollectorRegistry, labels: Mapping[str, str]) -> None:
        self.registry = registry
        self.labels = dict(labels)

    def collect(self) -> Iterator[Metric]:
        for family in self.registry.collect():
            labelled = Metric(family.name, family.documentation, family.type, family.unit)
            labelled.samples = [
                s._replace(labels={**s.labels, **self.labels}) for s in family.samples
            ]
            yield labelled


@asynccontextmanager
async def live_metrics(
    *,
    model: str,
    endpoint: str,
    points: int,
    spec_tokens: int | None,
    port: int,
    host: str = "127.0.0.1",
    labels: Mapping[str, str] | None = None,
    thinking: bool = False,
) -> AsyncIterator[tuple[MetricsServer, MetricsObserver]]:
    """Everything the CLI's --metrics-port needs: a fresh registry served on host:port
    (every series with `labels` added), and the observer to pass to run_sweep."""
    registry = CollectorRegistry()
    metrics = LoadgenMetrics(registry)
    observer = MetricsObserver(
        metrics,
        model=model,
        endpoint=endpoint,
        points=points,
        spec_tokens=spec_tokens,
        thinking=thinking,
    )
    served = registry
    if labels:
        served = CollectorRegistry()
        served.register(WithLabels(registry, labels))
    async with serve_metrics(served, host, port) as server:
        try:
            yield server, observer
        finally:
            observer.finished()


@asynccontextmanager
async def serve_metrics(
    registry: CollectorRegistry,
    host: str = "127.0.0.1",
    port: int = 0,
    limits: ServerLimits = DEFAULT_LIMITS,
) -> AsyncIterator[MetricsServer]:
    """/metrics on host:port (0 picks a free port) for the CLI's --metrics-port; with
    --metrics-host 0.0.0.0 anyone may connect: `limits` keeps them from holding sockets."""
    app = guarded_app(limits, log, "loadgen --metrics-port")
    app.router.add_get("/metrics", metrics_handler(registry))
    runner, bound = await start_guarded(app, host, port)
    try:
        yield MetricsServer(host, bound)
    finally:
        await runner.cleanup()
