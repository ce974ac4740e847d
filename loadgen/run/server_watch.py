"""Is the server still there? Decides when a sweep must stop because its server is gone.

The rule (docs/failure-behaviour.md, "Run-level failures"):

- Suspicion: SUSPECT_AFTER requests in a row (warmup or measured) ended with a
  connection-level failure: `connect` (refused, reset before sending) or `disconnect`
  (the connection broke or the stream ended early). Any answer from the server (a
  completed request, an HTTP error status, an error event, a malformed body) resets the
  count; timeouts and cancellations say nothing either way.
- While suspected, no new request is sent (a dead server would otherwise turn the rest
  of the point into instant `connect` errors, each a wasted measurement), and the server
  is probed with GET /health on a fresh connection every PROBE_EVERY_S: any HTTP answer
  (even 404), or any request completing meanwhile, clears the suspicion.
- Gone: suspected for GONE_AFTER_S without an answer. One-off resets under load never
  trigger it (they are interleaved with answers); a killed server does within ~1 s.
- With `--server-pid`, also gone as soon as that process has exited (or is a zombie, or
  its pid now belongs to another process), or after it has been stopped (SIGSTOP, a
  debugger) for STOPPED_FOR_S: a frozen server accepts connections into its backlog and
  never answers, which no connection-level rule can see.

Timing here is real time (time.monotonic), never the scheduler's clock: a dead server
is a fact of the wall, not of a virtual test clock.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import time
from collections.abc import Awaitable, Callable
from typing import NoReturn

from loadgen.errors import ServerError
from loadgen.records import ErrorKind, RequestRecord
from loadgen.run.server_processes import process_stat

SUSPECT_AFTER = 8  # connection-level failures in a row
GONE_AFTER_S = 1.0  # suspected this long with no answer to any probe
PROBE_EVERY_S = 0.2
PID_POLL_S = 0.1
STOPPED_FOR_S = 2.0

_CONNECTION_LEVEL = (ErrorKind.CONNECT, ErrorKind.DISCONNECT)
_NEUTRAL = (ErrorKind.TIMEOUT, ErrorKind.CANCELLED)

Probe = Callable[[], Awaitable[bool]]


class ServerGone(ServerError):
    """The server stopped answering (or its process ended) during the sweep."""

    stop_reason = "server_gone"


def process_state(pid: int) -> tuple[str, str] | None:
    """(state letter, start time in clock ticks) from /proc, None when there is no such
    process. Without /proc (not Linux): ("?", "") while signal 0 reaches it."""
    stat = process_stat(pid)
    if stat is not None:
        return stat.state, stat.start
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:
        pass
    return "?", ""


class ServerWatch:
    """Fed every request outcome; `run()` raises ServerGone when the rule above fires."""

    def __init__(
        self, probe: Probe, server_pid: int | None = None, pid_source: str = "--server-pid"
    ) -> None:
        self._probe = probe
        self._pid = server_pid
        self._pid_source = pid_source  # where the pid came from, for the line
        started = process_state(server_pid) if server_pid is not None else None
        self._pid_start = started[1] if started is not None else ""
        self._streak = 0
        self._last_failure = ""
        self._suspect_since: float | None = None
        self._stopped_since: float | None = None
        self.verdict: ServerGone | None = None  # set when run() raised it
        self._open = asyncio.Event()  # set: requests may go out
        self._open.set()
        self._wake = asyncio.Event()

    def observe(self, record: RequestRecord) -> None:
        if record.error in _CONNECTION_LEVEL:
            self._streak += 1
            self._last_failure = f"{record.error}: {record.error_detail}"[:160]
            if self._streak >= SUSPECT_AFTER and self._suspect_since is None:
                self._suspect_since = time.monotonic()
                self._open.clear()
                self._wake.set()
        elif record.error not in _NEUTRAL:
            self._answered()

    def _answered(self) -> None:
        self._streak = 0
        self._suspect_since = None
        self._open.set()

    async def admit(self) -> None:
        """Wait while the server is suspected gone (returns at once otherwise)."""
        if not self._open.is_set():
            await self._open.wait()

    async def settled(self) -> None:
        """Wait for the verdict on a suspicion that is still open (a point must not be
        written complete while its server may be gone)."""
        await self.admit()

    async def run(self) -> NoReturn:
        """Watch until cancelled; raise ServerGone when the server is gone (also kept as
        `verdict`: a point stopped by the cancellation that follows says why)."""
        try:
            await self._watch()
        except ServerGone as gone:
            self.verdict = gone
            raise

    async def _watch(self) -> NoReturn:
        while True:
            self._wake.clear()  # before the checks: a suspicion raised during them re-wakes
            if self._pid is not None:
                self._check_process()
            if self._suspect_since is not None:
                await self._confirm()
                continue
            poll = PID_POLL_S if self._pid is not None else None
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(poll):
                    await self._wake.wait()

    async def _confirm(self) -> None:
        while (since := self._suspect_since) is not None:
            if await self._probe():
                self._answered()
                return
            if self._pid is not None:
                self._check_process()
            waited = time.monotonic() - since
            if waited >= GONE_AFTER_S:
                raise ServerGone(
                    f"the server stopped answering: {self._streak} requests in a row failed "
                    f"at the connection (last: {self._last_failure}) and it answered no "
                    f"probe for {waited:.1f} s"
                )
            await asyncio.sleep(PROBE_EVERY_S)

    def _check_process(self) -> None:
        assert self._pid is not None
        state = process_state(self._pid)
        if (
            state is None
            or state[0] in ("Z", "X")
            or (self._pid_start and state[1] != self._pid_start)
        ):
            raise ServerGone(f"the server process {self._pid} ({self._pid_source}) has exited")
        if state[0] not in ("T", "t"):
            self._stopped_since = None
            return
        now = time.monotonic()
        if self._stopped_since is None:
            self._stopped_since = now
        elif now - self._stopped_since >= STOPPED_FOR_S:
            raise ServerGone(
                f"the server process {self._pid} ({self._pid_source}) has been stopped "
                f"(SIGSTOP or a debugger) for {now - self._stopped_since:.1f} s"
            )
