"""Live Prometheus metrics: loadgen's instruments, the observer that feeds them, /metrics.

Everything lives on a `CollectorRegistry` passed in (never the global one), so a test,
the CLI and the sidecar each own theirs. The runner calls a `MetricsObserver` (the
`RunObserver` protocol) once per point and once per request; all per-chunk work is
done per finished record with numpy, never per chunk from the transport.

Series and labels (model_name, endpoint, conc = the concurrency point; never per request;
`model_name` is vLLM's name for the served model label, so one selector matches both):
  loadgen_requests_total{outcome="ok"|"error"}, loadgen_request_errors_total{kind}
  loadgen_{prompt,output}_tokens_total, loadgen_decode_{chunks,tokens}_total,
  loadgen_decode_accepted_tokens_per_position_total{position}
  histograms (seconds): loadgen_time_to_first_token_seconds,
  loadgen_inter_chunk_latency_seconds, loadgen_inter_token_latency_seconds,
  loadgen_time_per_output_token_seconds, loadgen_e2e_request_latency_seconds,
  loadgen_queue_time_seconds; loadgen_decode_chunk_tokens (tokens per decode chunk)
  gauges: loadgen_requests_in_flight, loadgen_target_concurrency, loadgen_sweep_points,
  loadgen_sweep_points_completed, loadgen_sweep_progress_ratio, loadgen_point_requests,
  loadgen_{server_spec_decode,stream}_acceptance_{length,rate},
  loadgen_server_spec_decode_acceptance_rate_per_position{position}
  loadgen_event_loop_lag_seconds (no labels: the client process itself), loadgen_build_info
Definitions are the result files' (loadgen.metrics.summary): a request is completed when it ended
without error and carried a token (else it failed, kind `no_tokens` when no error was
set); prompt tokens are loadgen's own input lengths (`total_input_tokens`); latency
histograms and token counters count completed requests only; decode chunks follow
`PointArrays.decode_chunk_mask` (same K), so the counters agree with the result files.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
from aiohttp import web
from prometheus_client import (
    CONTENT_TYPE_LATEST,
    CollectorRegistry,
    Counter,
    Gauge,
    Info,
    generate_latest,
)
from prometheus_client.metrics_core import Metric

from loadgen import __version__
from loadgen.histogram import BulkHistogram, HistogramSeries
from loadgen.metrics.acceptance import accepted_at_position
from loadgen.metrics.arrays import PointArrays
from loadgen.metrics.checks import NO_TOKENS, failure_kind
from loadgen.metrics.schema import PointResult
from loadgen.metrics.summary import latency_samples
from loadgen.records import ErrorKind, RequestRecord

POINT_LABELS = ("model_name", "endpoint", "conc")
RUN_LABELS = ("model_name", "endpoint")
# Chunk gaps: ~100 us (MTP bursts, loopback) to seconds (prefill stalls, preemption).
ITL_BUCKETS = (
    0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.0075, 0.01, 0.015, 0.02, 0.025, 0.03,
    0.04, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.5, 0.75, 1.0, 2.5, 5.0, 10.0,
)
# First token: milliseconds on an idle server to minutes when 512 long prompts queue.
TTFT_BUCKETS = (
    0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
    10.0, 20.0, 40.0, 80.0, 160.0, 320.0, 640.0,
)
# Whole requests: osl 1024 at 20 tok/s/user is ~50 s; long sweeps reach many minutes.
E2E_BUCKETS = (
    0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0, 50.0, 60.0,
    90.0, 120.0, 180.0, 240.0, 300.0, 600.0, 900.0, 1200.0, 1800.0, 3600.0,
)
QUEUE_BUCKETS = (
    0.00001, 0.0001, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0,
    120.0, 300.0, 600.0,
)
LOOP_LAG_BUCKETS = (
    0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25,
    0.5, 1.0,
)
# Integer token counts: `le="2.0"` counts chunks of at most 2 tokens (1 accepted draft).
CHUNK_TOKEN_BUCKETS = (1, 2, 3, 4, 5, 6, 7, 8, 10, 12, 16, 24, 32, 64)
MAX_POSITIONS = 16  # draft positions tracked per chunk; caps the `position` label


class LoadgenMetrics:
    """All of loadgen's instruments, registered on `registry`."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self.registry = registry
        pl, rl = POINT_LABELS, RUN_LABELS

        def counter(name: str, doc: str, extra: tuple[str, ...] = ()) -> Counter:
            return Counter(name, doc, [*pl, *extra], registry=registry)

        def hist(name: str, doc: str, buckets: tuple[float, ...]) -> BulkHistogram:
            return BulkHistogram(name, doc, pl, buckets, registry)

        def gauge(name: str, doc: str, labels: tuple[str, ...]) -> Gauge:
            return Gauge(name, doc, list(labels), registry=registry)

        self.requests = counter(
            "loadgen_requests", "Finished requests by outcome (ok or error).", ("outcome",))
        self.request_errors = counter(
            "loadgen_request_errors", "Failed requests by error kind.", ("kind",))
        self.prompt_tokens = counter(
            "loadgen_prompt_tokens", "Prompt tokens of completed requests.")
        self.output_tokens = counter(
            "loadgen_output_tokens", "Output tokens (server usage) of completed requests.")
        self.decode_chunks = counter(
            "loadgen_decode_chunks", "Decode chunks: every chunk after the first, except a "
            "last chunk cut by max_tokens.")
        self.decode_tokens = counter(
            "loadgen_decode_tokens", "Tokens carried by decode chunks; "
            "rate(tokens)/rate(chunks) is the stream acceptance length.")
        self.decode_accepted = counter(
            "loadgen_decode_accepted_tokens_per_position", "Decode chunks with more than "
            "`position` tokens beyond the first (accepted draft at that position).",
            ("position",))
        self.ttft = hist("loadgen_time_to_first_token_seconds",
                         "Time to first token (first chunk - send).", TTFT_BUCKETS)
        self.itl_chunk = hist("loadgen_inter_chunk_latency_seconds",
                              "Gap between consecutive chunks (ITL per chunk).", ITL_BUCKETS)
        self.itl_token = hist("loadgen_inter_token_latency_seconds",
                              "Chunk gap / tokens of the later chunk, once per token "
                              "(ITL per token).", ITL_BUCKETS)
        self.tpot = hist("loadgen_time_per_output_token_seconds",
                         "(E2E - TTFT) / (output tokens - 1) per request.", ITL_BUCKETS)
        self.e2e = hist("loadgen_e2e_request_latency_seconds",
                        "Last chunk - send, per request.", E2E_BUCKETS)
        self.queue = hist("loadgen_queue_time_seconds",
                          "Wait between being due and being sent (concurrency slot).",
                          QUEUE_BUCKETS)
        self.chunk_tokens = hist("loadgen_decode_chunk_tokens",
                                 "Tokens per decode chunk (1 + accepted draft tokens).",
                                 tuple(float(b) for b in CHUNK_TOKEN_BUCKETS))
        self.in_flight = gauge("loadgen_requests_in_flight", "Requests sent, not finished.", rl)
        self.target_concurrency = gauge(
            "loadgen_target_concurrency", "Concurrency of the current sweep point.", rl)
        self.sweep_points = gauge("loadgen_sweep_points", "Points planned in the sweep.", rl)
        self.sweep_points_completed = gauge(
            "loadgen_sweep_points_completed", "Points finished in the sweep.", rl)
        self.sweep_progress = gauge(
            "loadgen_sweep_progress_ratio", "Fraction of the sweep's requests finished.", rl)
        self.point_requests = gauge(
            "loadgen_point_requests", "Requests planned at the concurrency point.", pl)
        self.server_al = gauge("loadgen_server_spec_decode_acceptance_length",
                               "Acceptance length from the server's spec-decode counters "
                               "over the point.", pl)
        self.server_rate = gauge("loadgen_server_spec_decode_acceptance_rate",
                                 "Acceptance rate from the server's counters over the point.",
                                 pl)
        self.server_rate_pos = gauge(
            "loadgen_server_spec_decode_acceptance_rate_per_position",
            "Per-position acceptance rate from the server's counters.", (*pl, "position"))
        self.stream_al = gauge("loadgen_stream_acceptance_length",
                               "Acceptance length from the stream over the point.", pl)
        self.stream_rate = gauge("loadgen_stream_acceptance_rate",
                                 "Acceptance rate from the stream over the point.", pl)
        self.loop_lag = BulkHistogram(
            "loadgen_event_loop_lag_seconds",
            "Client event-loop backlog during measured phases: time for a posted callback to "
            "run (the same samples as the result files' client_loop_lag_*).",
            (), LOOP_LAG_BUCKETS, registry)
        self.loop_lag.labels()  # unlabelled: exposed (empty) from the start
        Info("loadgen_build", "loadgen version.", registry=registry).info(
            {"version": __version__})

    def observer(self, *, model: str, endpoint: str, points: int | None = None,
                 spec_tokens: int | None = None) -> MetricsObserver:
        """A RunObserver for one sweep of `points` concurrency points; `spec_tokens` (K)
        decides which truncated final chunks count as decode chunks, as in the results."""
        return MetricsObserver(self, model=model, endpoint=endpoint, points=points,
                               spec_tokens=spec_tokens)


@dataclass(slots=True)
class _PointSeries:
    """The children of one (model_name, endpoint, conc): looked up once per point, not per
    record."""

    ok: Any
    error: Any
    errors: dict[str, Any]  # failure kind (ErrorKind values + no_tokens) -> child
    prompt_tokens: Any
    output_tokens: Any
    decode_chunks: Any
    decode_tokens: Any
    accepted: Callable[[int], Any]  # position -> child, created on first use
    ttft: HistogramSeries
    itl_chunk: HistogramSeries
    itl_token: HistogramSeries
    tpot: HistogramSeries
    e2e: HistogramSeries
    queue: HistogramSeries
    chunk_tokens: HistogramSeries


class MetricsObserver:
    """Feeds LoadgenMetrics from the runner's callbacks (all sync and cheap)."""

    def __init__(self, metrics: LoadgenMetrics, *, model: str, endpoint: str,
                 points: int | None, spec_tokens: int | None) -> None:
        self.metrics = metrics
        self.spec_tokens = spec_tokens
        self._run = (model, endpoint)
        self._points: dict[int, _PointSeries] = {}
        self._planned_points = points
        self._point_requests = 0
        self._point_finished = 0
        self._completed_points = 0
        self._loop_lag = metrics.loop_lag.labels()
        self._in_flight = metrics.in_flight.labels(*self._run)
        self._in_flight.set(0)
        metrics.sweep_points.labels(*self._run).set(points or 0)
        metrics.sweep_points_completed.labels(*self._run).set(0)
        metrics.sweep_progress.labels(*self._run).set(0)

    def _series(self, conc: int) -> _PointSeries:
        series = self._points.get(conc)
        if series is None:
            series = self._points[conc] = self._make_series(conc)
        return series

    def _make_series(self, conc: int) -> _PointSeries:
        m, key = self.metrics, (*self._run, str(conc))
        return _PointSeries(
            ok=m.requests.labels(*key, "ok"), error=m.requests.labels(*key, "error"),
            # Every kind exists from the start, so "errors by kind" reads 0, not "no data".
            errors={kind: m.request_errors.labels(*key, kind)
                    for kind in [*(k.value for k in ErrorKind), NO_TOKENS]},
            prompt_tokens=m.prompt_tokens.labels(*key),
            output_tokens=m.output_tokens.labels(*key),
            decode_chunks=m.decode_chunks.labels(*key),
            decode_tokens=m.decode_tokens.labels(*key),
            # Positions appear only once a draft was accepted there (no 16 zero series
            # on a server without speculative decoding).
            accepted=functools.cache(lambda p: m.decode_accepted.labels(*key, str(p))),
            ttft=m.ttft.labels(*key), itl_chunk=m.itl_chunk.labels(*key),
            itl_token=m.itl_token.labels(*key), tpot=m.tpot.labels(*key),
            e2e=m.e2e.labels(*key), queue=m.queue.labels(*key),
            chunk_tokens=m.chunk_tokens.labels(*key),
        )

    def point_started(self, conc: int, num_requests: int) -> None:
        self._series(conc)
        self._point_requests, self._point_finished = num_requests, 0
        self.metrics.target_concurrency.labels(*self._run).set(conc)
        self.metrics.point_requests.labels(*self._run, str(conc)).set(num_requests)

    def request_started(self, conc: int) -> None:
        self._in_flight.inc()

    def request_finished(self, record: RequestRecord) -> None:
        self._in_flight.dec()
        series = self._series(record.conc)
        self._point_finished += 1
        self._set_progress()
        kind = failure_kind(record)
        if kind is not None:
            series.error.inc()
            series.errors[kind].inc()
            return
        series.ok.inc()
        observe_completed(series, record, self.spec_tokens)

    def finished(self) -> None:
        """The sweep is over (done, failed or cancelled): no target, nothing in flight."""
        self.metrics.target_concurrency.labels(*self._run).set(0)
        self._in_flight.set(0)

    def _set_progress(self) -> None:
        if not self._planned_points:
            return
        within = (min(1.0, self._point_finished / self._point_requests)
                  if self._point_requests else 0.0)
        done = min(1.0, (self._completed_points + within) / self._planned_points)
        self.metrics.sweep_progress.labels(*self._run).set(done)

    def loop_lag(self, seconds: float) -> None:
        self._loop_lag.observe(seconds)

    def point_finished(self, conc: int, result: PointResult) -> None:
        m, key = self.metrics, (*self._run, str(conc))
        if self.spec_tokens is None and result["spec_tokens"] is not None:
            # K found from the server's /metrics by the first point: later points then
            # count decode chunks exactly as their result files do.
            self.spec_tokens = result["spec_tokens"]
        self._completed_points += 1
        self._point_requests = self._point_finished = 0
        m.sweep_points_completed.labels(*self._run).set(self._completed_points)
        self._set_progress()
        for gauge, value in ((m.server_al, result["server_acceptance_length"]),
                             (m.server_rate, result["server_acceptance_rate"]),
                             (m.stream_al, result["stream_acceptance_length"]),
                             (m.stream_rate, result["stream_acceptance_rate"])):
            if value is not None:
                gauge.labels(*key).set(value)
        for position, rate in enumerate(result["server_acceptance_per_position"] or ()):
            m.server_rate_pos.labels(*key, str(position)).set(rate)

def observe_completed(series: _PointSeries, record: RequestRecord,
                      spec_tokens: int | None) -> None:
    """All instruments of one completed request (at least one chunk).

    Every quantity comes from the same definitions the result files use (metrics/), on
    this one record: a live series and its result field can never disagree on meaning.
    """
    arrays = PointArrays.build([record])
    samples = latency_samples(arrays)
    series.prompt_tokens.inc(record.input_len)
    series.output_tokens.inc(record.output_tokens)
    series.queue.observe(max(0, record.queue_ns) / 1e9)
    series.ttft.observe(float(samples["ttft"][0]) / 1e3)
    series.e2e.observe(float(samples["e2el"][0]) / 1e3)
    if samples["tpot"].size:
        series.tpot.observe(float(samples["tpot"][0]) / 1e3)
    gaps_ms, later = arrays.itl_per_chunk_ms()
    if gaps_ms.size == 0:
        return
    series.itl_chunk.observe_many(gaps_ms / 1e3)
    positive = later > 0
    series.itl_token.observe_many(gaps_ms[positive] / later[positive] / 1e3, later[positive])
    decode = arrays.chunk_tokens[arrays.decode_chunk_mask(spec_tokens)]
    if decode.size == 0:
        return
    series.decode_chunks.inc(int(decode.size))
    series.decode_tokens.inc(int(decode.sum()))
    series.chunk_tokens.observe_many(decode.astype(np.float64))
    for position, count in enumerate(accepted_at_position(decode, MAX_POSITIONS)):
        if count == 0:
            break
        series.accepted(position).inc(count)


def metrics_handler(registry: CollectorRegistry,
                    ) -> Callable[[web.Request], Awaitable[web.Response]]:
    """An aiohttp handler serving `registry` in the Prometheus text format."""

    async def handle(request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry),
                            headers={"Content-Type": CONTENT_TYPE_LATEST})

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
            labelled.samples = [s._replace(labels={**s.labels, **self.labels})
                                for s in family.samples]
            yield labelled


@asynccontextmanager
async def live_metrics(*, model: str, endpoint: str, points: int, spec_tokens: int | None,
                       port: int, host: str = "127.0.0.1",
                       labels: Mapping[str, str] | None = None,
                       ) -> AsyncIterator[tuple[MetricsServer, MetricsObserver]]:
    """Everything the CLI's --metrics-port needs: a fresh registry served on host:port
    (every series with `labels` added), and the observer to pass to run_sweep."""
    registry = CollectorRegistry()
    metrics = LoadgenMetrics(registry)
    observer = metrics.observer(model=model, endpoint=endpoint, points=points,
                                spec_tokens=spec_tokens)
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
async def serve_metrics(registry: CollectorRegistry, host: str = "127.0.0.1",
                        port: int = 0) -> AsyncIterator[MetricsServer]:
    """/metrics on host:port (0 picks a free port) for the CLI's --metrics-port."""
    app = web.Application()
    app.router.add_get("/metrics", metrics_handler(registry))
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound = runner.addresses[0][1]
        yield MetricsServer(host, int(bound))
    finally:
        await runner.cleanup()
