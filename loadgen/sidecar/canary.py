"""Steady canary load between runs (`--canary-conc N --canary-interval S`).

Every S seconds while no run is active, a small sweep at concurrency N feeds the same
Prometheus instruments, so latency panels and alerts have data at all times. A run that
is posted cancels a canary round in progress; its results are not kept (only the last
round's files, under <data-dir>/canary/).
"""

from __future__ import annotations

import asyncio
import logging
import shutil
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

from loadgen.config.args import spec_from_options
from loadgen.run.sweep import SweepOptions
from loadgen.scale.sweep import run_sweep
from loadgen.sinks.prometheus import LoadgenMetrics, MetricsObserver

log = logging.getLogger("loadgen.serve")
CANARY_ISL = 256
CANARY_OSL = 64


@dataclass(frozen=True, slots=True)
class CanarySettings:
    target: str
    model: str
    conc: int
    interval_s: float
    data_dir: Path


class Canary:
    def __init__(
        self, settings: CanarySettings, metrics: LoadgenMetrics, is_busy: Callable[[], bool]
    ) -> None:
        self.settings = settings
        self.metrics = metrics
        self._is_busy = is_busy
        self._round: asyncio.Task[None] | None = None
        self.rounds = 0

    @asynccontextmanager
    async def running(self) -> AsyncIterator[None]:
        if self.settings.conc <= 0:
            yield
            return
        loop_task = asyncio.create_task(self._loop(), name="loadgen-canary")
        try:
            yield
        finally:
            loop_task.cancel()
            await self.pause()
            await asyncio.wait([loop_task])

    async def pause(self) -> None:
        """Stop a canary round in progress (a run is about to start)."""
        if self._round is not None and not self._round.done():
            self._round.cancel()
            await asyncio.wait([self._round])

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.settings.interval_s)
            if self._is_busy():
                continue
            self._round = asyncio.create_task(self._one_round(), name="loadgen-canary-round")
            # wait(), not await: a round cancelled by pause() must not end this loop, while
            # cancelling this loop still raises here (the round is then stopped by pause()).
            await asyncio.wait([self._round])
            if not self._round.cancelled() and self._round.exception() is not None:
                log.warning("loadgen serve: canary round failed: %s", self._round.exception())

    async def _one_round(self) -> None:
        s = self.settings
        results_dir = s.data_dir / "canary"
        shutil.rmtree(results_dir, ignore_errors=True)
        spec = spec_from_options(
            {
                "base_url": s.target,
                "model": s.model,
                "conc": str(s.conc),
                "isl": CANARY_ISL,
                "osl": CANARY_OSL,
                "prompts_per_conc": 1,
                "warmup_per_conc": 0,
                "results": str(results_dir),
                "no_progress": True,
            }
        )
        observer = MetricsObserver(
            self.metrics,
            model=s.model,
            endpoint=spec.target.endpoint,
            points=1,
            spec_tokens=spec.scoring.spec_tokens,
        )
        try:
            await run_sweep(spec, SweepOptions(observer=observer))
        finally:
            observer.finished()
        self.rounds += 1
