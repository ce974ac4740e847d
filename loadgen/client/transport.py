"""A request's timing and outcome, the exception -> ErrorKind boundary, and the aiohttp client.

Timing (docs/design.md, "Timing under bursts"): the first Python code that sees a socket
read is the client protocol's data callback (client/native/protocol.py, or
`StampingResponseHandler` in aiohttp_seam.py for `--http-client aiohttp`). It reads
perf_counter_ns before parsing anything and keeps the stamp with the bytes. The ingest
(ingest.py) parses the events later, in short slices between socket polls, and gives
each event the stamp of the read that carried its first byte, so parsing cost never
shifts a timestamp. Request starts and per-request bookkeeping are paced (a few per loop
turn) so that a wave of requests ending or starting together cannot stop the polling
either.

A request's clock starts immediately before its bytes are written to the socket (the
native client stamps it before its one write; aiohttp's `request_chunk_sent` trace
signal marks the body write, with the buffered headers). Opening a new connection is
timed separately (`connect_ns`).

No wait is unbounded (deadlines.py): the session's default timeout (`--http-timeout`)
bounds every non-streaming call; a streamed request has an idle deadline instead
(`--stream-idle-timeout`) under the optional overall `--request-timeout`.
"""

from __future__ import annotations

import asyncio
import errno
import functools
import time
from collections.abc import Callable, Mapping
from time import perf_counter_ns
from types import SimpleNamespace
from typing import Any

import aiohttp

from loadgen.client.deadlines import STREAM_TIMEOUT, IdleDeadline, StreamIdle, http_timeout
from loadgen.client.events import MalformedEvent, TokenCounter
from loadgen.client.ingest import BodyStream, Exchange, Ingest, StartPacer
from loadgen.client.malformed_body import MalformedBody
from loadgen.client.native.protocol import BadHttpResponse
from loadgen.client.redirects import same_origin_redirects
from loadgen.client.sse import ArrivalLog
from loadgen.client.stream_client import (
    ERROR_BODY_LIMIT,
    RequestClock,
    StreamClient,
    is_event_stream,
    record_rejection,
)
from loadgen.config.spec import DEFAULT_HTTP_TIMEOUT_S, DEFAULT_STREAM_IDLE_TIMEOUT_S
from loadgen.errors import SetupError
from loadgen.records import ErrorKind, RequestRecord
from loadgen.workload.plan import RequestSpec

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


def open_session(
    *,
    max_connections: int,
    headers: Mapping[str, str] | None = None,
    read_bufsize: int = READ_BUFSIZE,
    http_timeout_s: float = DEFAULT_HTTP_TIMEOUT_S,
    stamping: bool = False,
) -> aiohttp.ClientSession:
    """One session per run: `max_connections` sockets at once. Its default timeout bounds
    every non-streaming call; streamed requests replace it with their own deadlines.
    `stamping`: the session also reads the measured streams (`--http-client aiohttp`),
    whose arrival stamps need aiohttp's internals (aiohttp_seam.py, imported only then)."""
    options: dict[str, Any] = {
        "limit": max_connections,
        "limit_per_host": 0,
        "keepalive_timeout": 3600.0,
        "force_close": False,
        "ttl_dns_cache": None,
    }
    if stamping:
        from loadgen.client.aiohttp_seam import StampingConnector

        connector: aiohttp.TCPConnector = StampingConnector(**options)
    else:
        connector = aiohttp.TCPConnector(**options)
    return aiohttp.ClientSession(
        connector=connector,
        timeout=http_timeout(http_timeout_s),
        headers={"Accept-Encoding": "identity", **(headers or {})},
        auto_decompress=False,  # bytes stay the bytes that were stamped
        read_bufsize=read_bufsize,
        trace_configs=[_trace_config()],
        skip_auto_headers=("User-Agent",),
        # the session's headers (--header secrets) never follow a redirect elsewhere
        middlewares=(same_origin_redirects,),
    )


class Transport:
    """Sends requests through one StreamClient and turns every outcome into a RequestRecord."""

    def __init__(
        self,
        client: StreamClient,
        url: str,
        *,
        request_timeout_s: float | None = None,
        stream_idle_timeout_s: float = DEFAULT_STREAM_IDLE_TIMEOUT_S,
        count_text: Callable[[str], int] | None = None,
    ) -> None:
        self.client = client
        self.url = url
        self.request_timeout_s = request_timeout_s
        self.stream_idle_timeout_s = stream_idle_timeout_s
        self.count_text = count_text
        self.ingest = Ingest()
        self.pacer = StartPacer()

    async def send(
        self,
        request: RequestSpec,
        *,
        x_request_id: str,
        conc: int,
        scheduled_ns: int,
        on_record: Callable[[RequestRecord], None],
    ) -> RequestRecord:
        """Send, stream, and record; `on_record` sees the record even when cancelled."""
        clock = RequestClock()
        state = Exchange(request.max_tokens, request.reply)
        counter = TokenCounter(self.count_text)
        called_ns = perf_counter_ns()
        sent_unix = time.time()
        cancelled = False
        try:
            await self.pacer.turn()
            clock.begin_ns = perf_counter_ns()
            await self._bounded(request, x_request_id, clock, state, counter)
        except asyncio.CancelledError:
            cancelled = True
            state.fail(ErrorKind.CANCELLED, "the run was stopped while this request was in flight")
        state.check_counts(counter)
        end_ns = state.end_ns or perf_counter_ns()
        if not cancelled:
            # Bookkeeping (record, JSONL line, observers) shares the per-turn budget with
            # starts: many requests ending in one engine step must not stop the polling.
            try:
                await self.pacer.turn()
            except asyncio.CancelledError:
                cancelled = True  # the request itself completed: its outcome stands
        start_ns = clock.sent_ns or clock.acquired_ns or called_ns
        record = RequestRecord(
            request_id=request.index,
            conc=conc,
            input_len=request.input_len,
            max_tokens=request.max_tokens,
            scheduled_ns=scheduled_ns,
            start_ns=start_ns,
            connect_ns=clock.connect_ns,
            chunk_ns=tuple(state.chunk_ns),
            chunk_tokens=tuple(state.chunk_tokens),
            end_ns=end_ns,
            token_source=counter.source,
            prompt_tokens=state.prompt_tokens,
            completion_tokens=state.completion_tokens,
            finish_reason=state.finish_reason,
            status=state.status,
            error=state.error,
            error_detail=state.detail,
            sent_unix=sent_unix,
            target_len=request.target_len,
            session_id=request.session_id,
            turn_index=request.turn_index,
            tree_id=request.tree_id,
            cached_tokens=state.cached_tokens,
            theoretical_cached_tokens=request.theoretical_cached_tokens,
            arrival_stamps=state.arrival_stamps,
            stray_bytes=state.stray_bytes,
            server_spec_decode=state.server_metrics[0],
            server_timings=state.server_metrics[1],
        )
        on_record(record)
        if cancelled:
            raise asyncio.CancelledError
        return record

    async def _bounded(
        self,
        request: RequestSpec,
        x_request_id: str,
        clock: RequestClock,
        state: Exchange,
        counter: TokenCounter,
    ) -> None:
        """The exchange under its deadlines; any outcome but cancellation becomes state."""
        headers = {"X-Request-Id": x_request_id, "Content-Type": "application/json"}
        if request.headers:  # session affinity (X-Session-ID or the router's own name)
            headers.update(request.headers)
        overall = asyncio.timeout(self.request_timeout_s)
        try:
            async with overall, IdleDeadline(self.stream_idle_timeout_s, clock.last_activity_ns):
                await self.client.exchange(
                    self.url, request.body, headers, clock, state, counter, self.ingest
                )
        except Exception as exc:  # the one translation boundary (programming errors re-raise)
            if not (isinstance(exc, TimeoutError) and state.done):
                # (a server that never closes the body after [DONE] is complete)
                capped = self.request_timeout_s if overall.expired() else None
                state.fail(*_classify(exc, clock, capped))


class AiohttpStreams:
    """The `StreamClient` over an aiohttp session (`--http-client aiohttp`)."""

    def __init__(self, session: aiohttp.ClientSession) -> None:
        from loadgen.client.aiohttp_seam import StampingConnector, protocol_of

        if not isinstance(session.connector, StampingConnector):
            raise ValueError("AiohttpStreams needs a session from open_session(stamping=True)")
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


class OutOfDescriptors(SetupError):
    """This process ran out of file descriptors: a limit of this machine, not a server
    failure, so it stops the run instead of being counted as a `connect` error."""


def descriptors_exhausted(exc: BaseException) -> OutOfDescriptors:
    """The run's stop for an EMFILE/ENFILE, wherever in the process it was raised (a
    connect here; a lazy import or a file open elsewhere: run/stops.py)."""
    return OutOfDescriptors(
        f"this process ran out of file descriptors "
        f"({f'{type(exc).__name__}: {exc}'.strip()}); raise `ulimit -n` "
        "or lower --conc"
    )


def _out_of_descriptors(exc: Exception) -> bool:
    """EMFILE/ENFILE, also when aiohttp wraps it (ClientConnectorError is an OSError
    carrying the socket call's errno)."""
    return isinstance(exc, OSError) and exc.errno in (errno.EMFILE, errno.ENFILE)


def _classify(
    exc: Exception, clock: RequestClock, capped_s: float | None = None
) -> tuple[ErrorKind, str]:
    """The only place where exceptions become ErrorKind values (`capped_s`: the
    --request-timeout that expired, if that is what ended the request). Running out of
    file descriptors is no value: it raises OutOfDescriptors, which stops the run."""
    detail = f"{type(exc).__name__}: {exc}".strip()
    if _out_of_descriptors(exc):
        raise descriptors_exhausted(exc) from exc
    if isinstance(exc, StreamIdle):
        return ErrorKind.TIMEOUT, str(exc)
    if isinstance(exc, TimeoutError):
        return ErrorKind.TIMEOUT, (
            f"--request-timeout {capped_s:g} s elapsed" if capped_s is not None else detail
        )
    if isinstance(exc, MalformedEvent | MalformedBody):
        return ErrorKind.MALFORMED, str(exc)
    if isinstance(exc, aiohttp.ClientConnectorError) or (
        isinstance(exc, OSError) and not clock.acquired_ns
    ):
        return ErrorKind.CONNECT, detail
    if isinstance(exc, aiohttp.ClientResponseError | BadHttpResponse):
        return ErrorKind.MALFORMED, detail  # not valid HTTP
    if isinstance(exc, aiohttp.ClientError | OSError):
        return ErrorKind.DISCONNECT, detail
    raise exc  # a programming error is not a measurement
