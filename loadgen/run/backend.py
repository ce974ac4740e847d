"""The runner's seam to a server: preflight, send a request, scrape its metrics.

The runner only ever talks to a `Backend`. `http_backend` is the real one, aimed at
`--base-url` or at the embedded simulator it starts: the measured streams go through the
client `--http-client` names (native by default; aiohttp kept for comparison), preflight
GETs and /metrics scrapes through one aiohttp session. Tests can pass a backend of their
own to run a whole sweep in-process, exactly and fast.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Callable
from pathlib import Path
from typing import Protocol

import aiohttp
from tokenizers import Tokenizer

from loadgen.client.native.client import NativeStreams
from loadgen.client.preflight import ServerInfo, preflight, scrape_metrics
from loadgen.client.stream_client import StreamClient
from loadgen.client.transport import AiohttpStreams, Transport, open_session
from loadgen.config.spec import RunSpec
from loadgen.metrics.server import ServerSnapshot
from loadgen.records import RequestRecord
from loadgen.workload.bodies import BodyOptions
from loadgen.workload.plan import RequestSpec, text_counter

OnRecord = Callable[[RequestRecord], None]


class Backend(Protocol):
    """A server as the runner sees it."""

    @property
    def target(self) -> str:
        """`server`, `simulator`, or a test backend's own name (written to the results)."""
        ...

    @property
    def base_url(self) -> str: ...

    async def preflight(self, options: BodyOptions, probe: tuple[str, int]) -> ServerInfo:
        """Check the server (ServerError when the run cannot start); after it, `send`
        uses the request options the server accepted (`ServerInfo.options`)."""
        ...

    async def send(self, request: RequestSpec, *, x_request_id: str, conc: int,
                   scheduled_ns: int, on_record: OnRecord) -> RequestRecord:
        """Send one request and return its record; `on_record` sees it even when the
        request is cancelled (which then re-raises CancelledError)."""
        ...

    async def scrape(self) -> ServerSnapshot | None:
        """The server's /metrics now, or None when it has none."""
        ...


class HttpBackend:
    """A real server: measured streams through `streams`, everything else through `session`."""

    def __init__(self, spec: RunSpec, session: aiohttp.ClientSession, target: str,
                 tokenizer: Tokenizer, streams: StreamClient | None = None) -> None:
        assert spec.base_url is not None
        self.spec = spec
        self.session = session
        self.streams = streams or AiohttpStreams(session)
        self.target = target
        self.base_url = spec.base_url.rstrip("/")
        self.tokenizer = tokenizer
        self._transport: Transport | None = None

    async def preflight(self, options: BodyOptions, probe: tuple[str, int]) -> ServerInfo:
        spec = self.spec
        server = await preflight(
            self.session, self.base_url, wanted_model=spec.model, isl=spec.isl, osl=spec.osl,
            options=options, prompt=probe, request_timeout_s=spec.request_timeout_s,
            streams=self.streams,
        )
        self._transport = Transport(self.streams, self.base_url + server.options.path,
                                    request_timeout_s=spec.request_timeout_s,
                                    count_text=text_counter(self.tokenizer))
        return server

    async def send(self, request: RequestSpec, *, x_request_id: str, conc: int,
                   scheduled_ns: int, on_record: OnRecord) -> RequestRecord:
        assert self._transport is not None, "preflight() first"
        return await self._transport.send(request, x_request_id=x_request_id, conc=conc,
                                          scheduled_ns=scheduled_ns, on_record=on_record)

    async def scrape(self) -> ServerSnapshot | None:
        return await scrape_metrics(self.session, self.base_url)


@contextlib.asynccontextmanager
async def http_backend(spec: RunSpec, results_dir: Path,
                       tokenizer: Tokenizer) -> AsyncIterator[HttpBackend]:
    """The server of `spec`: `--base-url`, or the embedded simulator started for `--sim`."""
    async with contextlib.AsyncExitStack() as stack:
        target = "server"
        if spec.sim:
            from loadgen.run.embedded_sim import embedded_simulator

            url = await stack.enter_async_context(
                embedded_simulator(spec.sim_args, log_path=results_dir / "simulator.log"))
            spec, target = dataclasses.replace(spec, base_url=url), "simulator"
        headers = dict(spec.headers)
        if spec.api_key:
            headers["Authorization"] = f"Bearer {spec.api_key}"
        session = await stack.enter_async_context(
            open_session(max_connections=max(spec.conc), headers=headers))
        streams: StreamClient = AiohttpStreams(session)
        if spec.http_client == "native":
            streams = NativeStreams(max_connections=max(spec.conc), headers=headers)
            stack.push_async_callback(streams.close)
        yield HttpBackend(spec, session, target, tokenizer, streams)
