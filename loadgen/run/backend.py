"""The runner's seam to a server: preflight, send a request, scrape its metrics.

The runner only ever talks to a `Backend`. `http_backend` is the real one, aimed at
`--base-url` or at the embedded simulator it starts: the measured streams go through
loadgen's native client (client/native/), preflight GETs and /metrics scrapes through one
aiohttp session (its public API). `StreamsSource` is the one seam for another client of
the measured streams (bench/aiohttp_client.py's comparison). Tests can pass a backend of
their own to run a whole sweep in-process, exactly and fast.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import aiohttp
from tokenizers import Tokenizer

from loadgen.client.http_session import open_session
from loadgen.client.liveness import answers_http
from loadgen.client.native.client import NativeStreams
from loadgen.client.preflight import ServerInfo, find_model, preflight
from loadgen.client.server_metrics import (
    WATCH_INTERVAL_S,
    GaugeWatch,
    Scrape,
    metrics_urls,
    scrape_all,
)
from loadgen.client.server_series import SeriesWatch
from loadgen.client.stream_client import StreamClient
from loadgen.client.transport import Transport
from loadgen.config.spec import RunSpec
from loadgen.metrics.engines import DIALECTS, VLLM, EngineDialect
from loadgen.records import RequestRecord
from loadgen.results.store import ResultsDir
from loadgen.workload.bodies import BodyOptions
from loadgen.workload.plan import RequestSpec, text_counter

if TYPE_CHECKING:
    from loadgen.run.embedded_sim import SimulatorLog
    from loadgen.run.launched_server import LaunchedServer

OnRecord = Callable[[RequestRecord], None]
PROBE_TIMEOUT_S = 0.5  # a liveness probe; loopback or LAN answers in milliseconds


class Backend(Protocol):
    """A server as the runner sees it."""

    @property
    def target(self) -> str:
        """`server`, `simulator`, or a test backend's own name (written to the results)."""
        ...

    @property
    def base_url(self) -> str: ...

    async def preflight(
        self, options: BodyOptions, probe: tuple[str, int], longest: tuple[int, int]
    ) -> ServerInfo:
        """Check the server (ServerError when the run cannot start) for requests up to
        `longest` (input, output) tokens; after it, `send` uses the request options the
        server accepted (`ServerInfo.options`)."""
        ...

    async def send(
        self,
        request: RequestSpec,
        *,
        x_request_id: str,
        conc: int,
        scheduled_ns: int,
        on_record: OnRecord,
    ) -> RequestRecord:
        """Send one request and return its record; `on_record` sees it even when the
        request is cancelled (which then re-raises CancelledError)."""
        ...

    async def scrape(self) -> Scrape:
        """The server's /metrics now (each `--server-metrics` URL's, or the target's)."""
        ...

    def gauge_watch(self) -> GaugeWatch | None:
        """A watcher of the KV-cache and queue gauges during a point, when asked for."""
        ...

    def series_watch(self) -> SeriesWatch | None:
        """A keeper of every /metrics scrape during a point (--aiperf-artifacts)."""
        ...

    async def probe(self) -> bool:
        """Whether the server answers at all right now (any HTTP status); asked only
        while it is suspected gone (run/server_watch.py)."""
        ...

    def take_tainted(self) -> dict[tuple[int, int], str]:
        """Records handed on before their connection showed them out of step, since the
        last call: (request_id, start_ns) -> why (empty when there are none, or for a
        backend that cannot tell); the point applies them at its end."""
        ...

    def fresh_connections(self) -> int:
        """Close the measured streams' idle connections before a --trials trial (each
        opens its own in its warmup); how many were closed (0 where none are kept)."""
        ...


@dataclass(frozen=True, slots=True)
class ServerSide:
    """What a run holds of its server beyond the Backend seam: the HTTP session its side
    requests go through (prefix cache resets, the profiler), and what loadgen started
    (the embedded simulator's log, the --serve-cmd server). Empty for a backend a test
    gives: then the features that need these are refused in one line."""

    session: aiohttp.ClientSession | None = None
    launched: LaunchedServer | None = None
    simulator_log: SimulatorLog | None = None


class HttpBackend:
    """A real server: measured streams through `streams`, everything else through `session`."""

    def __init__(
        self,
        spec: RunSpec,
        session: aiohttp.ClientSession,
        target: str,
        tokenizer: Tokenizer,
        streams: StreamClient,
        simulator_log: SimulatorLog | None = None,
        launched: LaunchedServer | None = None,
    ) -> None:
        assert spec.target.base_url is not None
        self.spec = spec
        self.simulator_log = simulator_log  # the simulator loadgen started, if it did
        self.launched = launched  # the server loadgen launched (--serve-cmd), if it did
        self.session = session
        self.streams = streams
        self.target = target
        self.base_url = spec.target.base_url.rstrip("/")
        self.tokenizer = tokenizer
        self.metrics_urls = metrics_urls(spec.telemetry.server_metrics, self.base_url)
        self.dialect: EngineDialect = VLLM  # the preflight's engine, once adopted
        self._transport: Transport | None = None

    @property
    def side(self) -> ServerSide:
        return ServerSide(self.session, self.launched, self.simulator_log)

    async def preflight(
        self, options: BodyOptions, probe: tuple[str, int], longest: tuple[int, int]
    ) -> ServerInfo:
        spec = self.spec
        server = await preflight(
            self.session,
            self.base_url,
            wanted_model=spec.target.model,
            isl=longest[0],
            osl=longest[1],
            options=options,
            prompt=probe,
            request_timeout_s=spec.deadlines.request_timeout_s,
            stream_idle_timeout_s=spec.deadlines.stream_idle_timeout_s,
            metrics_urls=self.metrics_urls if spec.telemetry.server_metrics else (),
            streams=self.streams,
            engine=spec.target.engine,
            strict=spec.target.strict_preflight,
        )
        self.adopt(server)
        return server

    def adopt(self, server: ServerInfo) -> None:
        """Send with what another process's preflight found (a worker process: the
        parent checked the server once for all of them)."""
        self.dialect = DIALECTS[server.engine]
        if not self.spec.telemetry.server_metrics:  # the engine's own Prometheus path
            self.metrics_urls = (self.base_url + self.dialect.metrics_path,)
        self._transport = Transport(
            self.streams,
            self.base_url + server.options.path,
            request_timeout_s=self.spec.deadlines.request_timeout_s,
            stream_idle_timeout_s=self.spec.deadlines.stream_idle_timeout_s,
            count_text=text_counter(self.tokenizer),
            spec_tokens=self.spec.scoring.spec_tokens,
            server_spec_tokens=server.spec_tokens,
            record_outputs=self.spec.output.record_outputs,
        )

    async def send(
        self,
        request: RequestSpec,
        *,
        x_request_id: str,
        conc: int,
        scheduled_ns: int,
        on_record: OnRecord,
    ) -> RequestRecord:
        assert self._transport is not None, "preflight() first"
        return await self._transport.send(
            request,
            x_request_id=x_request_id,
            conc=conc,
            scheduled_ns=scheduled_ns,
            on_record=on_record,
        )

    async def scrape(self) -> Scrape:
        return await scrape_all(self.session, self.metrics_urls, self.dialect)

    def take_tainted(self) -> dict[tuple[int, int], str]:
        """Records handed on before their connection showed them out of step (native
        client): (request_id, start_ns) -> why; the point applies them at its end."""
        return self._transport.take_tainted() if self._transport is not None else {}

    def fresh_connections(self) -> int:
        """Close the measured streams' idle connections (--trials: each trial opens its
        own in its warmup). aiohttp's pool has no such call: it keeps its connections."""
        streams = self.streams
        return streams.drop_idle() if isinstance(streams, NativeStreams) else 0

    def gauge_watch(self) -> GaugeWatch | None:
        spec = self.spec
        if not spec.telemetry.server_metrics and spec.load.slice_duration_s is None:
            return None
        # slices place the KV-cache samples: two per slice, but no faster than 10 a second
        # (each scrape is the client's CPU during the measured phase)
        interval = (
            None
            if spec.load.slice_duration_s is None
            else max(0.1, min(WATCH_INTERVAL_S, spec.load.slice_duration_s / 2))
        )
        return GaugeWatch(self.session, self.metrics_urls, interval, self.dialect)

    def series_watch(self) -> SeriesWatch | None:
        if self.spec.output.aiperf_artifacts is None:
            return None
        return SeriesWatch(self.session, self.metrics_urls, self.spec.telemetry.series_interval_s)

    async def probe(self) -> bool:
        return await answers_http(self.base_url, PROBE_TIMEOUT_S)


def request_headers(spec: RunSpec) -> dict[str, str]:
    headers = dict(spec.target.headers)
    if spec.target.api_key:
        headers["Authorization"] = f"Bearer {spec.target.api_key}"
    return headers


async def served_model(spec: RunSpec, base_url: str) -> str:
    """The model the server at `base_url` serves now (--model when it serves that one),
    asked without a whole preflight: the `--metrics-port` label, and what a `--resume`d
    search's kept probes are held to. Through the run's bounded session setup and
    headers; PreflightError when the server does not answer with one model."""
    async with open_session(
        max_connections=1,
        headers=request_headers(spec),
        timeout_s=spec.deadlines.http_timeout_s,
    ) as session:
        name, _ = await find_model(session, base_url.rstrip("/"), spec.target.model)
    return name


@contextlib.asynccontextmanager
async def open_native_streams(spec: RunSpec, max_connections: int) -> AsyncIterator[StreamClient]:
    """loadgen's own client of the measured streams."""
    native = NativeStreams(max_connections=max_connections, headers=request_headers(spec))
    try:
        yield native
    finally:
        await native.close()


@dataclass(frozen=True, slots=True)
class StreamsSource:
    """A client of the measured streams: its name (the spec's `http_client`, which the
    results record) and how to open it for a spec with so many connections. loadgen has
    one, NATIVE_STREAMS; the seam is for bench/'s comparison client (in the run's own
    process only: worker processes always use the native one)."""

    name: str
    open: Callable[[RunSpec, int], AbstractAsyncContextManager[StreamClient]]


NATIVE_STREAMS = StreamsSource("native", open_native_streams)


@contextlib.asynccontextmanager
async def http_backend(
    spec: RunSpec,
    results_dir: Path,
    tokenizer: Tokenizer,
    attempt: int = 1,
    streams: StreamsSource = NATIVE_STREAMS,
) -> AsyncIterator[HttpBackend]:
    """The server of `spec`: `--base-url`, the embedded simulator started for `--sim`
    (its log is the attempt's: a --resume keeps the earlier attempt's), or the server
    `--serve-cmd` launches (run/launched_server.py, its log the attempt's too); the
    measured streams through `streams`."""
    async with contextlib.AsyncExitStack() as stack:
        target, log = "server", None
        if spec.sim:
            from loadgen.run.embedded_sim import started_simulator

            sim = await stack.enter_async_context(
                started_simulator(
                    spec.sim_args,
                    log_path=ResultsDir(results_dir).attempt_simulator_log(attempt),
                    dev_mode=spec.target.reset_prefix_cache,
                )
            )
            spec, target, log = (
                spec.with_(base_url=sim.base_url),
                "simulator",
                sim.log,
            )
        launched = None
        if spec.target.serve_cmd:  # --serve-cmd: the server this run launches and stops
            from loadgen.run.launched_server import launched_server

            launched = await stack.enter_async_context(
                launched_server(
                    spec,
                    ResultsDir(results_dir).attempt_server_log(attempt),
                    request_headers(spec),
                )
            )
            spec = spec.with_(base_url=launched.base_url)
        session = await stack.enter_async_context(
            open_session(
                max_connections=max(spec.load.conc),
                headers=request_headers(spec),
                timeout_s=spec.deadlines.http_timeout_s,
            )
        )
        client = await stack.enter_async_context(streams.open(spec, max(spec.load.conc)))
        yield HttpBackend(spec, session, target, tokenizer, client, log, launched)
