"""Client health of a point measured by one or many client processes.

Each process that sent requests reports its own CPU time and event-loop lag over the
measured phase (`ProcessHealth`); the result's `client_*` fields combine them: CPU adds
up (the whole client's cost per chunk), loop lag is the worst process's (one lagging
process stamps its own requests late, whatever the others did), and `client_processes`
lists every process so a hot one can be found.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadgen.records import RequestRecord
from loadgen.results.point import ClientHealth, ClientProcess


@dataclass(frozen=True, slots=True)
class ProcessHealth:
    """One client process over one point's measured phase."""

    label: str  # "shard 0/1 worker 1/2", or "parent" for the process collecting records
    requests: int
    chunks: int
    cpu_seconds: float
    lag_ns: tuple[int, ...]  # loop-lag samples (empty for a process that stamps nothing)
    # the event loop it measured on ("uvloop", "asyncio"): the CLI, the workers and the
    # sidecar must all time on the same one
    event_loop: str | None = None

    def figures(self) -> ClientProcess:
        lags = np.asarray(self.lag_ns, dtype=np.float64) / 1e6
        return ClientProcess(
            process=self.label,
            requests=self.requests,
            chunks=self.chunks,
            cpu_seconds=self.cpu_seconds,
            cpu_per_chunk_us=self.cpu_seconds / self.chunks * 1e6 if self.chunks else None,
            loop_lag_p99_ms=float(np.percentile(lags, 99)) if lags.size else None,
            loop_lag_max_ms=float(lags.max()) if lags.size else None,
            loop_lag_samples=int(lags.size),
            event_loop=self.event_loop,
        )


def running_loop_name() -> str:
    """The package the running event loop comes from: "uvloop" or "asyncio"."""
    return type(asyncio.get_running_loop()).__module__.split(".")[0]


def counts(records: Sequence[RequestRecord]) -> tuple[int, int]:
    """(requests, chunks) of the records a process produced."""
    return len(records), sum(len(r.chunk_ns) for r in records)


def client_health(
    processes: Sequence[ClientProcess], chunks: int, clock_uncertainty_ms: float | None
) -> ClientHealth:
    """The result's client_* fields from every process's `ProcessHealth.figures()`
    (`chunks` = the point's total_chunks, completed requests only, as before), and how far
    the processes' clocks may disagree (0 on one machine)."""
    cpu = sum(p.cpu_seconds for p in processes)
    lagging = [p for p in processes if p.loop_lag_samples]
    return ClientHealth(
        client_cpu_seconds=cpu,
        client_cpu_per_chunk_us=cpu / chunks * 1e6 if chunks else None,
        client_loop_lag_p99_ms=max(
            (p.loop_lag_p99_ms for p in lagging if p.loop_lag_p99_ms is not None), default=None
        ),
        client_loop_lag_max_ms=max(
            (p.loop_lag_max_ms for p in lagging if p.loop_lag_max_ms is not None), default=None
        ),
        client_loop_lag_samples=sum(p.loop_lag_samples for p in processes),
        client_processes=list(processes),
        clock_alignment_uncertainty_ms=clock_uncertainty_ms,
    )
