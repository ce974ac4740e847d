"""The engine's seam to the servers' prefix caches (--reset-prefix-cache): what a point
asks before its warmup (or after it, --reset-after-warmup), and the one the sweep builds
for an HTTP server (client/cache_reset.py). Tests pass their own, as they do a Backend."""

from __future__ import annotations

from typing import Protocol

from loadgen.client.cache_reset import HttpCacheReset, reset_servers
from loadgen.config.spec import RunSpec
from loadgen.errors import UsageError
from loadgen.results.point import CacheState
from loadgen.run.backend import ServerSide


class CacheControl(Protocol):
    async def check(self) -> None:
        """Before the first point: a LoadgenError (one line) when a server cannot be reset."""
        ...

    async def reset(self) -> CacheState:
        """Empty every server's prefix cache now: `reset`, or `reset_failed` and why."""
        ...


def http_cache_control(spec: RunSpec, side: ServerSide, base_url: str) -> CacheControl:
    """The resets --reset-prefix-cache asks for, over the run's HTTP session."""
    if side.session is None:
        raise UsageError(
            "--reset-prefix-cache: this backend is not an HTTP server; pass its CacheControl"
        )
    return HttpCacheReset(
        side.session,
        reset_servers(base_url, spec.telemetry.server_metrics),
        timeout_s=spec.target.reset_timeout_s,
        reset_external=spec.target.reset_external,
    )
