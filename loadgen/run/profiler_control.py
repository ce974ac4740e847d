"""The engine's seam to the server's profiler (--profile-conc): what a point asks around
its measured phase. The run's features build the HTTP one (client/server_profiler.py,
features/__init__.py); tests pass their own, as they do a Backend."""

from __future__ import annotations

from typing import Protocol

from loadgen.client.server_profiler import StartFailure


class ProfilerControl(Protocol):
    @property
    def where(self) -> str:
        """Where the server writes its traces, as far as known (after `check`)."""
        ...

    async def check(self) -> None:
        """Before the first point: a LoadgenError (one line) when the server cannot
        profile."""
        ...

    async def start(self, prefix: str) -> StartFailure | None:
        """Open a window whose trace files start with `prefix`: None, or why not."""
        ...

    async def stop(self) -> str | None:
        """Close the window (its trace written): None, or why not."""
        ...


def profile_prefix(run_id: str, conc: int) -> str:
    """The trace files' prefix for a point: vLLM's rule (1-128 of [A-Za-z0-9._-],
    alphanumeric first) holds for every run id (run/ids.py)."""
    return f"loadgen-{run_id}-c{conc}"
