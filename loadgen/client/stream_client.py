"""The seam between the transport (timing, outcomes) and the HTTP client that streams.

loadgen's one `StreamClient` is the native one (client/native/: a protocol of its own on
uvloop with llhttp); bench/aiohttp_client.py implements it over aiohttp, as a comparison.
Both stamp arrivals in their protocol's data callback and hand the body to the same ingest.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from time import perf_counter_ns
from typing import Protocol

from loadgen.client.events import TokenCounter
from loadgen.client.ingest import Exchange, Ingest
from loadgen.records import ErrorKind

ERROR_BODY_LIMIT = 2000  # bytes of a rejected response's body kept in the record


class Activity(Protocol):
    """Where a response's newest arrival stamp is (sse.ArrivalLog, the native Response)."""

    def last_stamp(self) -> int | None: ...


@dataclass(slots=True)
class RequestClock:
    """A request's timestamps (perf_counter_ns), filled in by the client that sends it."""

    connect_begin: int = 0
    connect_ns: int = 0  # time to open a new connection (TCP + TLS); 0 when one was reused
    acquired_ns: int = 0  # a connection is ours
    sent_ns: int = 0  # immediately before the request bytes go to the socket
    begin_ns: int = 0  # when the request was handed to the client
    activity: Activity | None = None  # the response's arrival stamps, once it has some

    def last_activity_ns(self) -> int:
        """Newest sign of life: the last body read, else the send (for the idle deadline)."""
        last = self.activity.last_stamp() if self.activity is not None else None
        return last or self.sent_ns or self.begin_ns


class StreamClient(Protocol):
    """Sends one POST and streams its response into `state` (via the ingest)."""

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
        """Fill `state` (status, events, failure); raise what `_classify` translates."""
        ...

    async def close(self) -> None: ...


def is_event_stream(status: int, content_type: str) -> bool:
    # A JSON body with 200 means the server ignored stream: true. Other content types
    # are tolerated: some servers label a valid event stream loosely.
    return status == 200 and content_type != "application/json"


def record_rejection(state: Exchange, status: int, body: bytes) -> None:
    """A response that is not an event stream: an HTTP error, or JSON for stream: true."""
    state.end_ns = perf_counter_ns()
    text = body[:ERROR_BODY_LIMIT].decode("utf-8", "replace").strip()
    if status == 101:  # aiohttp hands the upgraded response over; native records it so
        state.fail(
            ErrorKind.HTTP,
            "HTTP 101: the server answered 101 Switching Protocols to a streamed completion",
        )
    elif status != 200:
        state.fail(ErrorKind.HTTP, f"HTTP {status}: {text}")
    else:  # e.g. a server that ignored stream: true
        state.fail(ErrorKind.MALFORMED, f"expected text/event-stream, got application/json: {text}")
