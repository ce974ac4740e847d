"""Client health: how late the client's own event loop runs a timer during a point.

Arrival stamps are only as good as the loop's promptness: if the client process is
starved (CPU contention) or blocked, every stamp taken meanwhile is late by that much.
A timer every `INTERVAL_S` measures it; the result files report its p99 and max so a
stalled client is visible instead of silently inflating TTFT and ITL. (uvloop's timers
are millisecond-grained, so values below ~1 ms are timer resolution, not stalls.)
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Iterator
from time import perf_counter_ns
from typing import Any

import numpy as np

INTERVAL_S = 0.01


class LoopLag:
    def __init__(self, interval_s: float = INTERVAL_S) -> None:
        self.interval_ns = int(interval_s * 1e9)
        self.samples: list[int] = []
        self._due = 0
        self._handle: asyncio.TimerHandle | None = None

    def start(self) -> None:
        self._schedule()

    def _schedule(self) -> None:
        self._due = perf_counter_ns() + self.interval_ns
        self._handle = asyncio.get_running_loop().call_later(
            self.interval_ns / 1e9, self._tick)

    def _tick(self) -> None:
        self.samples.append(max(0, perf_counter_ns() - self._due))
        self._schedule()

    def stop(self) -> dict[str, Any]:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if not self.samples:
            return {"client_loop_lag_p99_ms": None, "client_loop_lag_max_ms": None}
        lags = np.array(self.samples, dtype=np.float64) / 1e6
        return {"client_loop_lag_p99_ms": float(np.percentile(lags, 99)),
                "client_loop_lag_max_ms": float(lags.max())}


@contextlib.contextmanager
def no_gc_pauses() -> Iterator[None]:
    """No cyclic-GC pause during a point's measured phase.

    A gen-2 collection over the run's objects stopped this loop for 10-40 ms (measured at
    conc 512); every arrival in that window would be stamped late. Objects built before
    the point (tokenizer, prompts) are frozen out of the collector, collection is off
    while requests run, and the cycles they leave behind are collected right after.
    Reference counting still frees everything else immediately.
    """
    was_enabled = gc.isenabled()
    gc.freeze()
    gc.disable()
    try:
        yield
    finally:
        gc.unfreeze()
        if was_enabled:
            gc.enable()
            gc.collect()
