"""Deadlines: no wait of loadgen's on a server is unbounded.

- Non-streaming calls (/v1/models, /version, /tokenize, /metrics) use the session's
  default timeout (`--http-timeout`, aiohttp's `total`): the whole call, body included.
- Streamed requests opt out of it (`STREAM_TIMEOUT`) and get an idle deadline instead
  (`--stream-idle-timeout`): no byte for that long, the time to the first one included,
  ends the request as a timeout. `--request-timeout` stays the overall cap.

The idle deadline costs nothing per socket read: arrival stamps are logged anyway
(sse.ArrivalLog), so one timer per idle period compares the newest with the clock and
re-arms for what remains; aiohttp's own `sock_read` would re-arm a timer on every read.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from time import perf_counter_ns
from types import TracebackType

import aiohttp

# Streams have no aiohttp timeout: the idle deadline and --request-timeout bound them.
STREAM_TIMEOUT = aiohttp.ClientTimeout(total=None, connect=None, sock_read=None, sock_connect=None)


def http_timeout(seconds: float) -> aiohttp.ClientTimeout:
    """The session default: every call that does not pass its own timeout gets this."""
    return aiohttp.ClientTimeout(total=seconds)


def timeout_of(session: aiohttp.ClientSession) -> str:
    """The session's default deadline as the user set it, for messages."""
    total = session.timeout.total
    return "no limit" if total is None else f"{total:g} s"


def unanswered(session: aiohttp.ClientSession, url: str) -> str:
    return (
        f"GET {url} did not answer within {timeout_of(session)} (--http-timeout); "
        "is the server hung or overloaded?"
    )


class StreamIdle(TimeoutError):
    """No byte of a streamed response arrived for --stream-idle-timeout."""


class IdleDeadline:
    """Cancel the enclosing task once `last_ns()` is `idle_s` old; raise StreamIdle.

    asyncio.timeout's mechanics (cancel, then uncancel on the way out, so an outer
    cancellation or timeout is never mistaken for this one), with a deadline that moves
    with every arrival without being touched on the arrival path.
    """

    def __init__(self, idle_s: float, last_ns: Callable[[], int]) -> None:
        self._idle_ns = int(idle_s * 1e9)
        self._idle_s = idle_s
        self._last_ns = last_ns
        self._handle: asyncio.TimerHandle | None = None
        self._task: asyncio.Task[object] | None = None
        self._cancelling = 0
        self.expired = False

    async def __aenter__(self) -> IdleDeadline:
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("IdleDeadline must be used inside a task")
        self._task = task
        self._cancelling = task.cancelling()
        self._arm(self._idle_ns)
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if (
            self.expired
            and self._task is not None
            and self._task.uncancel() <= self._cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise StreamIdle(
                f"no bytes from the server for {self._idle_s:g} s (--stream-idle-timeout)"
            ) from exc

    def _arm(self, wait_ns: int) -> None:
        self._handle = asyncio.get_running_loop().call_later(wait_ns / 1e9, self._check)

    def _check(self) -> None:
        quiet = perf_counter_ns() - self._last_ns()
        if quiet < self._idle_ns:  # bytes came since: wait for what remains
            self._arm(self._idle_ns - quiet)
            return
        self._handle = None
        self.expired = True
        assert self._task is not None
        self._task.cancel()
