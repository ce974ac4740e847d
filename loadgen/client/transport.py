"""A request's timing and outcome, and the exception -> ErrorKind boundary. (Everything
that is not a measured stream goes through http_session.py's session.)

Timing (docs/design.md, "Timing under bursts"): the first Python code that sees a socket
read is the client protocol's data callback (client/native/protocol.py). It reads
perf_counter_ns before parsing anything and keeps the stamp with the bytes. The ingest
(ingest.py) parses the events later, in short slices between socket polls, and gives
each event the stamp of the read that carried its first byte, so parsing cost never
shifts a timestamp. Request starts and per-request bookkeeping are paced (a few per loop
turn) so that a wave of requests ending or starting together cannot stop the polling
either.

A request's clock starts immediately before its bytes are written to the socket (the
native client stamps it before its one write). Opening a new connection is
timed separately (`connect_ns`).

No wait is unbounded (deadlines.py): the session's default timeout (`--http-timeout`)
bounds every non-streaming call; a streamed request has an idle deadline instead
(`--stream-idle-timeout`) under the optional overall `--request-timeout`.
"""

from __future__ import annotations

import asyncio
import dataclasses
import errno
import time
from collections.abc import Callable
from time import perf_counter_ns

import aiohttp

from loadgen.client.deadlines import IdleDeadline, StreamIdle
from loadgen.client.events import MalformedEvent, TokenCounter
from loadgen.client.ingest import Exchange, Ingest, StartPacer
from loadgen.client.malformed_body import MalformedBody
from loadgen.client.native.protocol import BadHttpResponse
from loadgen.client.outputs import OutputKeeper
from loadgen.client.stream_client import (
    RequestClock,
    StreamClient,
)
from loadgen.config.spec import DEFAULT_STREAM_IDLE_TIMEOUT_S
from loadgen.errors import SetupError
from loadgen.records import ErrorKind, RequestRecord, StrayBytes
from loadgen.workload.plan import RequestSpec


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
        spec_tokens: int | None = None,
        server_spec_tokens: int | None = None,
        record_outputs: bool = False,
    ) -> None:
        self.client = client
        self.record_outputs = record_outputs  # --record-outputs: keep what came back
        # the run's K (--spec-tokens) and the server's (its /metrics): each request's
        # spec-decode stats must have both
        self.spec_tokens = spec_tokens
        self.server_spec_tokens = server_spec_tokens
        self.url = url
        self.request_timeout_s = request_timeout_s
        self.stream_idle_timeout_s = stream_idle_timeout_s
        self.count_text = count_text
        self.ingest = Ingest()
        self.pacer = StartPacer()
        # records already handed on when their connection later showed them out of step:
        # (request_id, start_ns) -> why; the point applies them (`take_tainted`)
        self.tainted: dict[tuple[int, int], str] = {}

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
        keeper = OutputKeeper() if self.record_outputs else None
        state = Exchange(request.max_tokens, request.reply, keeper)
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
        state.check_counts(counter, self.spec_tokens, self.server_spec_tokens)
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
            output=None if keeper is None else keeper.output(state.finish_reason, request.body),
            phase_marks=tuple(state.phase_marks),
            textless_phase_chunks=state.textless_phase_chunks,
        )
        if state.taint.why:
            record = tainted(record, state.taint.why)
        else:
            key = (record.request_id, record.start_ns)
            state.taint.then = lambda why: self.tainted.__setitem__(key, why)
        on_record(record)
        if cancelled:
            raise asyncio.CancelledError
        return record

    def take_tainted(self) -> dict[tuple[int, int], str]:
        """The records tainted since the last call, by (request_id, start_ns)."""
        found, self.tainted = self.tainted, {}
        return found

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


def tainted(record: RequestRecord, why: str) -> RequestRecord:
    """A record whose response its connection later showed out of step: never counted ok
    (docs/results.md, `stray_bytes_later`). A failed one keeps its own cause."""
    if record.error is not None:
        return record
    return dataclasses.replace(
        record,
        error=ErrorKind.MALFORMED,
        error_detail=why[:500],
        stray_bytes=StrayBytes.LATER,
    )


class OutOfDescriptors(SetupError):
    """This process ran out of file descriptors: a limit of this machine, not a server
    failure, so it stops the run instead of being counted as a `connect` error."""

    stop_reason = "out_of_file_descriptors"


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
