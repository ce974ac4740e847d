"""Client health: how long the client's own event loop takes to get round, per point.

Arrival stamps are only as good as the loop's promptness: a socket that becomes readable
while the loop is busy (or the process is starved of CPU) is stamped late by that much.
Every `INTERVAL_S` a timer posts a callback and measures how long the loop takes to run
it: the backlog an arrival at that moment would wait behind. (Not the timer's own
lateness: uvloop's timers fire up to ~4 ms late on an idle loop here, which delays no
socket read and would drown the signal.) The result files report its p99 and max, so a
stalled client is visible instead of silently inflating TTFT and ITL; each sample also
goes to `on_sample` (the live `loadgen_event_loop_lag_seconds` histogram), so Grafana
and the result file show the one same quantity.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from time import perf_counter_ns

import numpy as np

INTERVAL_S = 0.01


@dataclass(frozen=True, slots=True)
class LoopHealth:
    """The loop-lag samples of one measured phase, summarized for the result file."""

    p99_ms: float | None
    max_ms: float | None
    samples: int


class LoopLag:
    def __init__(
        self,
        interval_s: float = INTERVAL_S,
        *,
        on_sample: Callable[[float], None] | None = None,
        clock: Callable[[], int] = perf_counter_ns,
    ) -> None:
        self.interval_ns = int(interval_s * 1e9)
        self.samples: list[int] = []
        self._on_sample = on_sample
        self._clock = clock
        self._handle: asyncio.TimerHandle | None = None
        self._stopped = False

    def start(self) -> None:
        self._schedule()

    def _schedule(self) -> None:
        self._handle = asyncio.get_running_loop().call_later(self.interval_ns / 1e9, self._tick)

    def _tick(self) -> None:
        self.probe()
        self._schedule()

    def probe(self) -> None:
        """Measure how long the loop takes from now to run a callback posted now."""
        asyncio.get_running_loop().call_soon(self._measure, self._clock())

    def _measure(self, posted_ns: int) -> None:
        if self._stopped:  # posted before stop(), ran after: not in the summary either
            return
        lag_ns = self._clock() - posted_ns
        self.samples.append(lag_ns)
        if self._on_sample is not None:
            self._on_sample(lag_ns / 1e9)

    def stop(self) -> LoopHealth:
        self._stopped = True
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        if not self.samples:
            return LoopHealth(None, None, 0)
        lags = np.array(self.samples, dtype=np.float64) / 1e6
        return LoopHealth(float(np.percentile(lags, 99)), float(lags.max()), len(lags))


@contextlib.contextmanager
def no_gc_pauses() -> Iterator[None]:
    """No cyclic-GC pause during a point's measured phase.

    A gen-2 collection over the run's objects stopped this loop for 10-40 ms (measured at
    conc 512); every arrival in that window would be stamped late. Objects built before
    the point (tokenizer, prompts) are frozen out of the collector, collection is off
    while requests run, and the cycles they leave behind are collected right after.
    Reference counting still frees everything else immediately.

    Only the young generations are collected after the point: every object the point
    made is in them (nothing was collected, so nothing was promoted), while a full
    collection would walk the whole heap again for each point (49 ms a point in a
    process that holds more than loadgen does, such as a test runner's).
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
            gc.collect(1)
