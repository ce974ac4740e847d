"""One HTTP/1.1 client connection: a protocol that stamps and appends, nothing more.

The measured streams' read path (docs/design.md, "Timing under bursts"). Per socket read
`data_received` takes the arrival stamp, appends (stamp, bytes) and queues the
connection on the ingest: no parsing at all. The ingest later calls `drain`, which
hands the bytes to llhttp (httptools, C) read by read, so each de-chunked body piece
keeps its read's stamp, and its body callback passes each piece straight to the
response's sink (the EventStream, body.py), which frames and decodes it -- all off the
timing path.

One `Response` per request; the connection is kept alive across them. Every failure is a
value here (`Response.error`); the exchange raises it for transport.py's `_classify`.
"""

from __future__ import annotations

import asyncio
from collections import deque
from collections.abc import Callable
from time import perf_counter_ns
from typing import cast

import httptools

from loadgen.client.ingest import Exchange, Ingest, Taint
from loadgen.client.native.body import Piece
from loadgen.records import StrayBytes


class BadHttpResponse(Exception):
    """The server's bytes are not a valid HTTP/1.1 response (classified MALFORMED)."""


class StrayResponse(Exception):
    """A message began after the response had ended: it belongs to no request."""


class ServerDisconnected(ConnectionError):
    """The connection closed before the response ended (classified DISCONNECT)."""


_NO_BODY_STATUS = frozenset({204, 304})
# The most bytes a response head (status line and headers, interim 1xx heads included)
# may take: llhttp has no limit of its own, and httptools keeps an unfinished header in
# memory, so a header that never ends grew without bound. vLLM's heads are ~200 bytes.
MAX_HEAD_BYTES = 64 << 10


# The answers a connection that never rests keeps tainting (protocol `served`): enough
# for any plausible run of out-of-step answers, bounded over a long closed-loop run.
MAX_SERVED = 256


class HeadTooLarge(BadHttpResponse):
    """The response head went past MAX_HEAD_BYTES without ending."""


class Response:
    """One response as it arrives: head, stamped body bytes, end or error."""

    __slots__ = (
        "complete",
        "content_type",
        "ended",
        "eof_body",
        "error",
        "head",
        "keep_alive",
        "last_read_ns",
        "listener",
        "parse",
        "pieces",
        "sink",
        "status",
        "stopper",
        "stray",
    )

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.status = 0  # 0 until the head has arrived
        self.content_type = ""
        self.eof_body = True  # no Content-Length and not chunked: the body ends at EOF
        self.keep_alive = False
        self.pieces: list[Piece] = []  # (arrival stamp, body bytes) per read, not yet parsed
        self.last_read_ns = 0  # the newest read's stamp (the idle deadline looks here)
        self.complete = False
        self.error: Exception | None = None
        self.stray: StrayBytes | None = None  # bytes on its connection that were no response's
        self.head: asyncio.Future[None] = loop.create_future()  # status and headers are here
        self.ended: asyncio.Future[None] = loop.create_future()  # body complete, or error
        # Takes each body piece as it is de-chunked (the EventStream's feed) instead of
        # `pieces`; `listener` is told when pieces were added (an error body's reader).
        self.sink: Callable[[int, bytes], None] | None = None
        self.listener: Callable[[], None] | None = None
        self.parse: Callable[[], None] = _nothing  # parse what has arrived (the protocol's drain)
        self.stopper: Callable[[Response, Exception], None] = _ignore  # the protocol's stop

    def last_stamp(self) -> int | None:
        return self.last_read_ns or None

    def stop(self, error: Exception) -> None:
        """The body's parser gave up (body.py): end the response with `error`, close."""
        self.stopper(self, error)

    def read_nowait(self) -> bytes:
        """The body bytes not parsed yet, joined (the text of an error response)."""
        data = b"".join(body for _, body in self.pieces)
        self.pieces = []
        return data


class StreamProtocol(asyncio.Protocol):
    """A keep-alive connection carrying one request at a time."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.lost: Exception | None = None
        self.queued = False  # on the ingest's ready queue (the ingest's Drainable)
        self._parser = httptools.HttpResponseParser(self)
        self._parse_bytes = self._parser.feed_data
        # Until a response's head is complete, reads go through _feed_head (which counts
        # them); from then on straight to llhttp: no cost per body read.
        self._feed: Callable[[bytes], None] = self._feed_head
        self._in_head = True
        self._head_bytes = 0
        self._response: Response | None = None
        self._reads: list[Piece] = []  # (stamp, bytes as received) not parsed yet
        self._ingest: Ingest | None = None
        self._stamp = 0  # of the read being parsed
        # The requests answered here since the connection's last clean idle period
        # (`served`, `reused`): bytes it gets while idle say an answer was out of step
        # (a stale copy taken as a later request's), so each of them is tainted.
        self._served: deque[Taint] = deque(maxlen=MAX_SERVED)  # the newest
        self._idle_ns = 0  # when it last went idle
        self._longest_ns = 0  # the longest exchange among _served
        # The id of the last response served here: the next must not repeat it (a stale
        # copy of the right size; ingest.py `Exchange._other_id`)
        self.last_id: str | None = None

    # -- used by the pool and the exchange --------------------------------------------

    def begin(self, loop: asyncio.AbstractEventLoop, ingest: Ingest) -> Response:
        """Expect a new response; the caller writes its request right after."""
        response = Response(loop)
        response.parse = self.drain
        response.stopper = self._stop
        self._response = response
        self._feed, self._in_head, self._head_bytes = self._feed_head, True, 0
        self._ingest = ingest
        if self.lost is not None:  # closed by the server between acquire and now
            self._fail(
                response,
                ServerDisconnected(
                    f"the server closed the connection before the request was sent: {self.lost}"
                ),
            )
        return response

    @property
    def reusable(self) -> bool:
        transport = self.transport
        return (
            self.lost is None
            and self._response is None
            and transport is not None
            and not transport.is_closing()
        )

    def release(self) -> None:
        """The exchange is over; keep the connection only if its response ended cleanly
        and nothing came after it."""
        response = self._response
        self._response = None
        if response is not None and response.complete and self._reads:
            response.stray = response.stray or StrayBytes.AFTER_RESPONSE
        if (
            self._reads
            or response is None
            or response.stray is not None
            or not (response.complete and response.keep_alive and response.error is None)
        ):
            self._reads = []  # bytes past the response's end: not a connection to reuse
            self.abort()

    def abort(self) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.abort()

    def served(self, state: Exchange, took_ns: int, now: int) -> None:
        """`state`'s response ended here and the connection goes idle, kept (per request)."""
        self._served.append(state.taint)  # (a connection never at rest: its newest)
        self.last_id = state.response_id
        self._idle_ns = now
        self._longest_ns = max(self._longest_ns, took_ns)

    def reused(self, now: int) -> None:
        """A request is about to be written on this kept connection (per request). Its
        idle period was silent (bytes would have closed it); it was a clean one if it
        lasted at least the longest exchange served since the last: the late answer to
        any of them would have come by then. Those requests stand for good."""
        if now - self._idle_ns >= self._longest_ns:
            self._served.clear()
            self._longest_ns = 0

    def _taint(self, why: str) -> None:
        served, self._served = self._served, deque(maxlen=MAX_SERVED)
        for taint in served:
            taint(why)

    # -- asyncio.Protocol ---------------------------------------------------------------

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        now = perf_counter_ns()  # before anything else: the arrival time
        self.received(data, now, now)

    def received(self, data: bytes, stamp: int, read_ns: int) -> None:
        """`data` arrived at `stamp` (the read's, or the kernel's: kernel_stamps.py) and
        was read at `read_ns` (what the ingest paces its parsing by)."""
        response = self._response
        if response is None:  # bytes nobody asked for: the connection is not reusable
            self.lost = BadHttpResponse(f"unexpected bytes on an idle connection: {data[:80]!r}")
            self.abort()
            self._taint(
                f"{len(data)} bytes no request asked for came on its connection while idle "
                f"after it, so its response may have been an earlier request's: {data[:80]!r}"
            )
            return
        response.last_read_ns = stamp
        self._reads.append((stamp, data))
        ingest = self._ingest
        assert ingest is not None
        if self.queued:
            ingest.last_read_ns = read_ns
        else:
            ingest.notify(self, read_ns)

    def drain(self) -> None:
        """The ingest's turn: parse the reads so far (body pieces go to the sink)."""
        reads = self._reads
        response = self._response
        if not reads or response is None:
            return
        self._reads = []
        if response.error is None:
            feed = self._feed
            try:
                for stamp, data in reads:
                    self._stamp = stamp
                    feed(data)  # calls on_body with the de-chunked bytes
            except httptools.HttpParserError as exc:
                self._parse_failed(response, exc)
                return
            except HeadTooLarge as exc:
                self._stop(response, exc)
                return
            except httptools.HttpParserUpgrade:  # not an HttpParserError
                self._upgraded(response)
                return
        listener = response.listener
        if listener is not None and response.pieces:
            listener()

    def _feed_head(self, data: bytes) -> None:
        """Parse a read while the head is unfinished; past MAX_HEAD_BYTES, give up."""
        self._parse_bytes(data)
        if self._in_head:  # all of this read was head: the head has not ended in it
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                raise HeadTooLarge(
                    f"the response head grew past {MAX_HEAD_BYTES >> 10} KiB "
                    f"without ending (the cap on a head); "
                    f"{self._head_bytes} bytes so far"
                )

    def _stop(self, response: Response, error: Exception) -> None:
        if response is self._response:
            self.abort()
            self._fail(response, error)

    def _parse_failed(self, response: Response, exc: Exception) -> None:
        """llhttp refused the bytes. After a complete response they are no request's
        (a second response the server sent unasked, or junk): the response stands, the
        connection closes, and the record says so (`stray_bytes`)."""
        self.abort()
        if response.complete:
            response.stray = StrayBytes.AFTER_RESPONSE
            return
        what = "body framing" if response.status else "response"
        self._fail(response, BadHttpResponse(f"invalid HTTP {what}: {exc}"))

    def _upgraded(self, response: Response) -> None:
        """A 101 Switching Protocols: llhttp stops parsing this connection for good. The
        request ends as that status (the exchange records it as an HTTP error); the
        connection closes; no other connection notices."""
        self.abort()
        response.status = self._parser.get_status_code()
        self._fail(
            response, BadHttpResponse(f"the server answered {response.status} Switching Protocols")
        )

    def arrived_before_write(self, data: bytes, stamp: int, written_ns: int) -> None:
        """The kernel stamped `data` before this connection's last request was written:
        the rest of an earlier response that waited in the socket, never this request's
        answer (kernel_stamps.py). Its request is malformed; the connection closes."""
        response = self._response
        self.abort()
        self._taint(
            f"{len(data)} bytes on its connection, stamped before a later request was "
            "written, were an answer out of step, so its response may have been an "
            f"earlier request's: {data[:80]!r}"
        )
        if response is None:
            self.lost = BadHttpResponse(f"unexpected bytes on an idle connection: {data[:80]!r}")
            return
        response.stray = StrayBytes.BEFORE_REQUEST
        self._fail(
            response,
            BadHttpResponse(
                f"{len(data)} bytes on the connection arrived {(written_ns - stamp) / 1e3:.1f} us "
                f"before this request was written (kernel receive stamp): they belong to an "
                f"earlier response, not this request's: {data[:80]!r}"
            ),
        )

    def connection_lost(self, exc: Exception | None) -> None:
        self.lost = exc or ServerDisconnected("the server closed the connection")
        self.drain()  # what arrived before the end decides how the response ended
        response = self._response
        if response is None or response.complete or response.error is not None:
            return  # (an error already decided how it ended)
        if exc is None and response.status and response.eof_body:
            self.on_message_complete()  # a body delimited by the connection's end
            return
        detail = f": {exc}" if exc is not None else ""
        self._fail(
            response,
            ServerDisconnected(
                "the server closed the connection "
                + ("mid-body" if response.status else "before sending a response")
                + detail
            ),
        )

    def _fail(self, response: Response, error: Exception) -> None:
        if response.error is None:
            response.error = error
        listener = response.listener
        if listener is not None:
            listener()  # parse what came before the failure
        _resolve(response.head)
        _resolve(response.ended)

    # -- llhttp callbacks (httptools) ----------------------------------------------------

    def on_message_begin(self) -> None:
        response = self._response
        if response is not None and response.complete:
            # Stop llhttp here (a callback error): these bytes must not touch the response.
            raise StrayResponse("a second response began after the first had ended")

    def on_header(self, name: bytes, value: bytes) -> None:
        response = self._response
        assert response is not None
        name = name.lower()
        if name == b"content-type":
            response.content_type = value.decode("latin-1").split(";")[0].strip().lower()
        elif name == b"content-length" or (
            name == b"transfer-encoding" and b"chunked" in value.lower()
        ):
            response.eof_body = False

    def on_headers_complete(self) -> None:
        response = self._response
        assert response is not None
        parser = self._parser
        response.status = status = parser.get_status_code()
        response.keep_alive = parser.should_keep_alive()
        if status < 200 or status in _NO_BODY_STATUS:
            response.eof_body = False
        if status >= 200:  # a 1xx head is interim: the real one follows
            self._in_head = False
            self._feed = self._parse_bytes
            _resolve(response.head)

    def on_body(self, body: bytes) -> None:
        response = self._response
        if response is not None:
            sink = response.sink
            if sink is not None:
                sink(self._stamp, body)
            else:
                response.pieces.append((self._stamp, body))

    def on_message_complete(self) -> None:
        response = self._response
        if response is None or response.complete:
            return
        if response.status < 200:  # the end of an interim 1xx response: forget its head
            response.status, response.content_type, response.eof_body = 0, "", True
            return
        response.complete = True
        _resolve(response.ended)


def _nothing() -> None:
    pass


def _ignore(_response: Response, _error: Exception) -> None:
    pass


def _resolve(future: asyncio.Future[None]) -> None:
    if not future.done():
        future.set_result(None)
