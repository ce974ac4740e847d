"""An aiohttp site that a network client cannot exhaust: the sidecar's and --metrics-port's.

Without it, a few hundred idle or half-open connections (no token needed) are each held
for aiohttp's keep-alive default of an hour, each a file descriptor: the run beside them
then dies of EMFILE. Three bounds (ServerLimits):

- at most `max_connections` open: at the cap, the oldest connection not handling a
  request is closed to make room (an attacker's idle sockets make way for /healthz or a
  Prometheus scrape); when every one is handling a request the new one is closed at
  once. One log line, at most every LOG_EVERY_S, says so: never a traceback per socket.
- `header_timeout_s` from the connection (or the end of its previous response) to a
  complete request head: aiohttp's own keep-alive timer, which closes a connection still
  waiting for a request, partial headers included.
- `body_timeout_s` to read a request body (`read_body`): 408 and the connection closed;
  and at most `max_body_reads` bodies received at once (503 and closed past it): a
  connection receiving a body is handling a request, so it is never evicted, and 64
  slow uploads would otherwise hold every connection (and /healthz out) for the
  body deadline.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any, ClassVar, cast

from aiohttp import web

LOG_EVERY_S = 10.0
LINGER_S = 2.0


BACKLOG = 128  # aiohttp's own default for a site


@dataclass(frozen=True, slots=True)
class ServerLimits:
    max_connections: int = 64
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0
    max_body_reads: int = 4

    def runner_kwargs(self) -> dict[str, Any]:
        """AppRunner's keyword arguments that apply the header deadline, and bound how
        long the unread rest of a refused body is drained before the close (aiohttp's
        default lingers 10 s, holding the socket that long)."""
        return {"keepalive_timeout": self.header_timeout_s, "lingering_time": LINGER_S}


DEFAULT_LIMITS = ServerLimits()


class BodyRefused(Exception):
    """A request body not read; the handler answers `status` and closes the connection."""

    status: ClassVar[int]


class BodyTimeout(BodyRefused):
    """The request body did not arrive in time."""

    status = 408


class BodiesBusy(BodyRefused):
    """`max_body_reads` bodies are being received already."""

    status = 503


async def read_body(request: web.Request) -> bytes:
    """The whole body, within the limits of the app's gate, or BodyRefused."""
    gate = request.app[GATE]
    limits = gate.limits
    if gate.body_reads >= limits.max_body_reads:
        raise BodiesBusy(
            f"{limits.max_body_reads} request bodies are being received already; "
            "send it again when one of them is done"
        )
    gate.body_reads += 1
    try:
        async with asyncio.timeout(limits.body_timeout_s):
            return await request.read()
    except TimeoutError:
        raise BodyTimeout(
            f"the request body did not arrive within {limits.body_timeout_s:g} s; send it whole"
        ) from None
    finally:
        gate.body_reads -= 1


class ConnectionGate:
    """The open connections of one site, oldest first, and which are handling a request."""

    def __init__(self, limits: ServerLimits, log: logging.Logger, name: str) -> None:
        self.limits = limits
        self._log = log
        self._name = name
        self._open: dict[asyncio.Transport, int] = {}  # -> requests in progress
        self.body_reads = 0  # request bodies being received (read_body)
        self._closed_since_log = 0
        self._last_log = 0.0

    @property
    def open_connections(self) -> int:
        return len(self._open)

    def admit(self, transport: asyncio.Transport) -> bool:
        """Whether `transport` may stay (room made for it when possible)."""
        if len(self._open) >= self.limits.max_connections:
            idle = next((t for t, busy in self._open.items() if busy == 0), None)
            self._note_closed()
            if idle is None:
                return False
            self._open.pop(idle)
            idle.abort()  # at once: no lingering on a socket that sent nothing useful
        self._open[transport] = 0
        return True

    def release(self, transport: asyncio.Transport) -> None:
        self._open.pop(transport, None)

    def _note_closed(self) -> None:
        self._closed_since_log += 1
        now = time.monotonic()
        if now - self._last_log >= LOG_EVERY_S:
            self._log.warning(
                "%s: %d connections open (the cap): closed %d to make room "
                "(oldest idle first); too many clients, or idle ones held "
                "open",
                self._name,
                self.limits.max_connections,
                self._closed_since_log,
            )
            self._last_log, self._closed_since_log = now, 0

    @web.middleware
    async def middleware(
        self,
        request: web.Request,
        handler: Callable[[web.Request], Awaitable[web.StreamResponse]],
    ) -> web.StreamResponse:
        """Marks the connection busy while its request is handled: never evicted then."""
        transport = request.transport
        if transport is None or transport not in self._open:
            return await handler(request)
        self._open[transport] += 1
        try:
            return await handler(request)
        finally:
            if transport in self._open:
                self._open[transport] -= 1

    def protocol_factory(self, server: web.Server) -> Callable[[], asyncio.Protocol]:
        return lambda: _Counted(cast(asyncio.Protocol, server()), self)


class _Counted(asyncio.Protocol):
    """aiohttp's protocol, with the gate told when the connection opens and closes."""

    def __init__(self, inner: asyncio.Protocol, gate: ConnectionGate) -> None:
        self._inner = inner
        self._gate = gate
        self._transport: asyncio.Transport | None = None  # set once admitted

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        tcp = cast(asyncio.Transport, transport)  # create_server's are
        if not self._gate.admit(tcp):
            tcp.abort()
            return
        self._transport = tcp
        self._inner.connection_made(tcp)

    def connection_lost(self, exc: Exception | None) -> None:
        if self._transport is not None:
            self._gate.release(self._transport)
            self._inner.connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._transport is not None:
            self._inner.data_received(data)

    def eof_received(self) -> bool | None:
        return self._inner.eof_received() if self._transport is not None else None

    def pause_writing(self) -> None:
        if self._transport is not None:
            self._inner.pause_writing()

    def resume_writing(self) -> None:
        if self._transport is not None:
            self._inner.resume_writing()


class GuardedSite(web.BaseSite):
    """A TCP site (web.TCPSite's job) whose connections pass through a ConnectionGate.

    Only BaseSite's public interface: the runner and the listening server are this
    class's own attributes (none of BaseSite's private ones), and stop() closes it."""

    def __init__(self, runner: web.BaseRunner, host: str, port: int, gate: ConnectionGate) -> None:
        super().__init__(runner, backlog=BACKLOG)
        self._host, self._port, self._gate = host, port, gate
        self._web_runner = runner
        self._listener: asyncio.Server | None = None

    @property
    def name(self) -> str:
        return f"http://{self._host}:{self._port}"

    @property
    def bound_port(self) -> int:
        """The port listened on (the runner's `addresses` would read BaseSite's private
        server, which this site does not set)."""
        assert self._listener is not None, "start() first"
        return int(self._listener.sockets[0].getsockname()[1])

    async def start(self) -> None:
        await super().start()  # registers the site with the runner (stopped by cleanup)
        server = self._web_runner.server
        assert server is not None  # BaseSite refuses a runner that is not set up
        loop = asyncio.get_running_loop()
        self._listener = await loop.create_server(
            self._gate.protocol_factory(server),
            self._host,
            self._port,
            backlog=BACKLOG,
            reuse_address=True,
        )

    async def stop(self) -> None:
        if self._listener is not None:
            self._listener.close()  # no new connections; cleanup then ends the open ones
        await super().stop()


GATE: web.AppKey[ConnectionGate] = web.AppKey("connection_gate", ConnectionGate)


async def start_guarded(
    app: web.Application,
    host: str,
    port: int,
    **runner_kwargs: Any,
) -> tuple[web.AppRunner, int]:
    """`app` (made by guarded_app) served on host:port (0: a free one) within its limits:
    (the runner, the bound port). The caller awaits runner.cleanup()."""
    runner = web.AppRunner(
        app, access_log=None, **app[GATE].limits.runner_kwargs(), **runner_kwargs
    )
    await runner.setup()
    try:
        site = GuardedSite(runner, host, port, app[GATE])
        await site.start()
    except BaseException:
        await runner.cleanup()
        raise
    return runner, site.bound_port


def guarded_app(
    limits: ServerLimits, log: logging.Logger, name: str, **app_kwargs: Any
) -> web.Application:
    """A web.Application whose connections start_guarded counts and caps."""
    gate = ConnectionGate(limits, log, name)
    middlewares = [gate.middleware, *app_kwargs.pop("middlewares", ())]
    app = web.Application(middlewares=middlewares, **app_kwargs)
    app[GATE] = gate
    return app
