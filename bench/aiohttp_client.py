"""The aiohttp streams client: bench/'s comparison against loadgen's native client.

loadgen measures with its native client (loadgen/client/native/); this one stays here so
bench/read_path.py and bench/client_overhead.py can still measure the two against each
other. It plugs into the engine only through public seams: `Transport(client, url)` and
`http_backend(..., streams=AIOHTTP_STREAMS)`.

Arrival stamps must be taken in the protocol's `data_received`, before aiohttp parses
anything, and aiohttp has no public seam for that: a subclass of its ResponseHandler,
installed through TCPConnector's `_factory`, reading `_payload`, `_reading_paused`,
`_buffer_paused` and a finished response's `_protocol`. That is why it is not in the
product: a new aiohttp release may move any of these; `check_private_api` says so in one
line (the bench scripts call it before they measure).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
from collections.abc import AsyncIterator, Callable, Mapping
from time import perf_counter_ns
from types import SimpleNamespace
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

from loadgen.client.deadlines import STREAM_TIMEOUT, http_timeout
from loadgen.client.events import TokenCounter
from loadgen.client.ingest import BodyStream, Exchange, Ingest
from loadgen.client.malformed_body import MalformedBody
from loadgen.client.redirects import same_origin_redirects
from loadgen.client.sse import ArrivalLog
from loadgen.client.stream_client import (
    ERROR_BODY_LIMIT,
    RequestClock,
    StreamClient,
    is_event_stream,
    record_rejection,
)
from loadgen.config.spec import RunSpec
from loadgen.errors import SetupError
from loadgen.run.backend import StreamsSource, request_headers

READ_BUFSIZE = 1 << 22  # aiohttp pauses the socket only past 2x this: never for one event


# Requests without a RequestClock (preflight GETs) pass through the same session untraced.
async def _on_create_start(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    if isinstance(clock := ctx.trace_request_ctx, RequestClock):
        clock.connect_begin = perf_counter_ns()


async def _on_create_end(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    if isinstance(clock := ctx.trace_request_ctx, RequestClock):
        clock.acquired_ns = perf_counter_ns()
        clock.connect_ns = clock.acquired_ns - clock.connect_begin


async def _on_reuse(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    if isinstance(clock := ctx.trace_request_ctx, RequestClock):
        clock.acquired_ns = perf_counter_ns()


async def _on_chunk_sent(_s: Any, ctx: SimpleNamespace, _p: Any) -> None:
    # On Python < 3.12 aiohttp writes the body (with the buffered headers) from a task of
    # its own, which runs only after every other ready callback: with 256 requests
    # starting together, tens of ms after the connection was acquired. The request's
    # clock starts here, at the write, so that delay is queue time and not TTFT.
    if isinstance(clock := ctx.trace_request_ctx, RequestClock) and not clock.sent_ns:
        clock.sent_ns = perf_counter_ns()


def _trace_config() -> aiohttp.TraceConfig:
    config = aiohttp.TraceConfig(trace_config_ctx_factory=SimpleNamespace)
    config.on_connection_create_start.append(_on_create_start)
    config.on_connection_create_end.append(_on_create_end)
    config.on_connection_reuseconn.append(_on_reuse)
    config.on_request_chunk_sent.append(_on_chunk_sent)
    return config


_PRIVATE_ATTRIBUTES = ("_payload", "_reading_paused", "_buffer_paused")


_aiohttp_data_received = ResponseHandler.data_received


class StampingResponseHandler(ResponseHandler):
    """aiohttp's protocol, plus an arrival log per response body and a body listener."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop)
        self._log_payload: object = None
        self._log = ArrivalLog()
        # The BodyStream of the response being read (set by the transport): woken on
        # every read so it can be parsed later, off the timing path.
        self.body_listener: Callable[[bool], None] | None = None
        # A request was written (set_response_params) and its response has not begun: a
        # response that begins otherwise is no request's and must not meet the next one.
        self._expecting = False

    def set_response_params(self, **kwargs: Any) -> None:
        self._expecting = True  # before aiohttp re-parses any bytes it kept
        super().set_response_params(**kwargs)

    def data_received(self, data: bytes) -> None:
        stamp = perf_counter_ns()  # before any parsing: this is the arrival time
        _aiohttp_data_received(self, data)  # not super(): this runs once per socket read
        if not data:  # aiohttp re-enters with b"" when it resumes reading
            return
        payload = self._payload
        if payload is not None:
            if payload is not self._log_payload:  # a response began (once per response)
                if not self._expecting:
                    self._stray()
                    return
                self._expecting = False
                self._log_payload = payload
                self._log = ArrivalLog()
            self._log.add(stamp, getattr(payload, "total_bytes", 0))
        listener = self.body_listener
        if listener is not None:
            listener(False)

    def _stray(self) -> None:
        """A response arrived while no request waited for one (the late end of an earlier
        one, or a second answer): aiohttp would hand it to the next request on this
        connection. Close the connection instead (the pool then opens a new one)."""
        self._should_close = True
        if self.transport is not None:
            self.transport.close()

    def resume_reading(self, resume_parser: bool = True) -> None:
        # aiohttp's StreamReader calls this after every read it serves; when reading is
        # not paused it would only re-run the parser on b"" and re-arm the transport,
        # a few us per chunk on the ingest path for nothing.
        if self._reading_paused or self._buffer_paused:
            super().resume_reading(resume_parser)

    def connection_lost(self, exc: BaseException | None) -> None:
        listener = self.body_listener
        if listener is not None:
            listener(True)  # parse what arrived before aiohttp turns it into an exception
        payload, broken = self._payload, self.exception()
        super().connection_lost(exc)
        # A body whose framing failed to parse (a chunk size that is not hex) after its
        # headers: aiohttp closes the connection but never fails the body, whose reader
        # would then wait forever. Fail it, so it ends now, as malformed.
        if (
            broken is not None
            and isinstance(payload, aiohttp.StreamReader)
            and not payload.is_eof()
            and payload.exception() is None
        ):
            payload.set_exception(MalformedBody(f"invalid HTTP body framing: {broken}"))
        if listener is not None:
            listener(False)

    def log_for(self, payload: object) -> ArrivalLog | None:
        return self._log if payload is self._log_payload else None


class StampingConnector(aiohttp.TCPConnector):
    """A TCPConnector whose connections use StampingResponseHandler.

    aiohttp has no public protocol-factory option; `_factory` is the one seam it has
    (checked by tests/client/test_transport.py against the installed aiohttp).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._factory = functools.partial(StampingResponseHandler, loop=self._loop)  # type: ignore[assignment]


def protocol_of(response: aiohttp.ClientResponse) -> StampingResponseHandler | None:
    connection = response.connection
    # A body that completed in the same read as its headers has already released the
    # connection; the response still holds its protocol.
    protocol = (
        connection.protocol if connection is not None else getattr(response, "_protocol", None)
    )
    return protocol if isinstance(protocol, StampingResponseHandler) else None


def open_stamping_session(
    *,
    max_connections: int,
    headers: Mapping[str, str] | None = None,
    read_bufsize: int = READ_BUFSIZE,
    http_timeout_s: float = 30.0,
) -> aiohttp.ClientSession:
    """A session whose connections stamp arrivals (StampingConnector) and whose traced
    requests fill their RequestClock (the connect, reuse and body-write signals)."""
    connector = StampingConnector(
        limit=max_connections,
        limit_per_host=0,
        keepalive_timeout=3600.0,
        force_close=False,
        ttl_dns_cache=None,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=http_timeout(http_timeout_s),
        headers={"Accept-Encoding": "identity", **(headers or {})},
        auto_decompress=False,  # bytes stay the bytes that were stamped
        read_bufsize=read_bufsize,
        trace_configs=[_trace_config()],
        skip_auto_headers=("User-Agent",),
        middlewares=(same_origin_redirects,),
    )


class AiohttpStreams:
    """The `StreamClient` over an aiohttp session (bench/ only)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        if not isinstance(session.connector, StampingConnector):
            raise ValueError("AiohttpStreams needs a session from open_stamping_session()")
        self.session = session
        self._protocol_of = protocol_of

    async def exchange(
        self,
        url: str,
        body: bytes,
        headers: Mapping[str, str],
        clock: RequestClock,
        state: Exchange,
        counter: TokenCounter,
        ingest: Ingest,
    ) -> None:
        async with self.session.post(
            url, data=body, headers=headers, trace_request_ctx=clock, timeout=STREAM_TIMEOUT
        ) as response:
            state.status = response.status
            if not is_event_stream(response.status, response.content_type):
                record_rejection(
                    state, response.status, await response.content.read(ERROR_BODY_LIMIT)
                )
                return
            await self._follow(response, clock, state, counter, ingest)

    async def close(self) -> None:
        pass  # the session belongs to whoever opened it

    async def _follow(
        self,
        response: aiohttp.ClientResponse,
        clock: RequestClock,
        state: Exchange,
        counter: TokenCounter,
        ingest: Ingest,
    ) -> None:
        """Hand the body to the ingest, then sleep until it has ended."""
        protocol = self._protocol_of(response)
        log = protocol.log_for(response.content) if protocol is not None else None
        if log is None:  # never expected: the protocol was rebound under us
            log = ArrivalLog()
            log.add(perf_counter_ns(), response.content.total_bytes)
        clock.activity = log
        stream = BodyStream(
            response.content, log, state, counter, ingest, functools.partial(_stop_body, response)
        )
        if protocol is not None:
            protocol.body_listener = stream.wake
        stream.wake()  # bytes that arrived with the headers
        try:
            await response.content.wait_eof()  # end of body, or the connection broke
        except (aiohttp.ClientError, OSError):
            pass  # finish() below raises it, after parsing everything that came before
        finally:
            if protocol is not None and protocol.body_listener == stream.wake:
                protocol.body_listener = None
            stream.drain()  # a cancelled or timed-out request keeps what had arrived
        stream.finish()


def _stop_body(response: aiohttp.ClientResponse, error: Exception) -> None:
    """The body's parser gave up: wake the reader now and close the connection (aiohttp
    would read on, into memory, until the server ended the body)."""
    response.content.set_exception(MalformedBody(str(error)))
    response.close()


def check_private_api() -> None:
    """Raise SetupError when the installed aiohttp lacks an internal this module uses."""
    handler = ResponseHandler(asyncio.new_event_loop())
    missing = [name for name in _PRIVATE_ATTRIBUTES if not hasattr(handler, name)]
    handler._loop.close()
    if "resume_parser" not in ResponseHandler.resume_reading.__code__.co_varnames:
        missing.append("ResponseHandler.resume_reading(resume_parser)")
    if "_factory" not in aiohttp.BaseConnector.__init__.__code__.co_names:
        missing.append("TCPConnector._factory")
    if missing:
        raise SetupError(
            f"aiohttp {aiohttp.__version__} lacks {', '.join(missing)}, which "
            "bench/aiohttp_client.py's arrival stamping needs; compare against "
            "an aiohttp release it ran with (3.14)"
        )


@contextlib.asynccontextmanager
async def _open_streams(spec: RunSpec, max_connections: int) -> AsyncIterator[StreamClient]:
    async with open_stamping_session(
        max_connections=max_connections,
        headers=request_headers(spec),
        http_timeout_s=spec.deadlines.http_timeout_s,
    ) as session:
        yield AiohttpStreams(session)


# what bench/client_overhead.py hands http_backend to run a whole sweep through aiohttp
AIOHTTP_STREAMS = StreamsSource("aiohttp", _open_streams)
