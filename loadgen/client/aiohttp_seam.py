"""Every use of aiohttp's private internals, in one module, checked when it is imported.

Arrival stamps must be taken in the protocol's `data_received`, before aiohttp parses
anything, and aiohttp has no public seam for that: a subclass of its ResponseHandler,
installed through TCPConnector's `_factory`, reading `_payload`, `_reading_paused`,
`_buffer_paused` and a finished response's `_protocol`. Only `--http-client aiohttp` imports
this module (the native client and every run's preflight use aiohttp's public API), so a
new aiohttp release cannot stop a native run; `check_private_api` fails at import, with
one line, if the installed aiohttp moved any of these.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Callable
from time import perf_counter_ns
from typing import Any

import aiohttp
from aiohttp.client_proto import ResponseHandler

from loadgen.client.malformed_body import MalformedBody
from loadgen.client.sse import ArrivalLog
from loadgen.errors import SetupError

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
            "--http-client aiohttp's arrival stamping needs; use the default "
            "native client, or an aiohttp release loadgen's tests ran against "
            "(3.14)"
        )


check_private_api()
