"""The engine's seam to the server's profiler (--profile-conc): what a point asks around
its measured phase, and the one the sweep builds for an HTTP server
(client/server_profiler.py). Tests pass their own, as they do a Backend."""

from __future__ import annotations

from typing import Protocol

from loadgen.client.server_profiler import HttpProfiler
from loadgen.errors import UsageError
from loadgen.run.backend import ServerSide


class ProfilerControl(Protocol):
    @property
    def where(self) -> str:
        """Where the server writes its traces, as far as known (after `check`)."""
        ...

    async def check(self) -> None:
        """Before the first point: a LoadgenError (one line) when the server cannot
        profile."""
        ...

    async def start(self, prefix: str) -> str | None:
        """Open a window whose trace files start with `prefix`: None, or why not."""
        ...

    async def stop(self) -> str | None:
        """Close the window (its trace written): None, or why not."""
        ...


def profile_prefix(run_id: str, conc: int) -> str:
    """The trace files' prefix for a point: vLLM's rule (1-128 of [A-Za-z0-9._-],
    alphanumeric first) holds for every run id (run/ids.py)."""
    return f"loadgen-{run_id}-c{conc}"


def http_profiler_control(side: ServerSide, base_url: str) -> ProfilerControl:
    """The windows --profile-conc asks for, over the run's HTTP session."""
    if side.session is None:
        raise UsageError(
            "--profile-conc: this backend is not an HTTP server; pass its ProfilerControl"
        )
    return HttpProfiler(side.session, base_url)
