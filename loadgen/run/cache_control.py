"""The engine's seam to the servers' prefix caches (--reset-prefix-cache): what a point
asks before its warmup (or after it, --reset-after-warmup). The run's features build the
HTTP one (client/cache_reset.py, features/__init__.py); tests pass their own, as they do
a Backend."""

from __future__ import annotations

from typing import Protocol

from loadgen.results.point import CacheState


class CacheControl(Protocol):
    async def check(self) -> None:
        """Before the first point: a LoadgenError (one line) when a server cannot be reset."""
        ...

    async def reset(self) -> CacheState:
        """Empty every server's prefix cache now: `reset`, or `reset_failed` and why."""
        ...
