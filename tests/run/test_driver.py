"""The sweep runs its points through the one Driver it is given (run/driver.py), on the
virtual-clock fake server of tests/support/exact_server.py: the driver sees every point in order,
a driver's stopped point is what the sweep keeps, and the engine refuses --workers
without the pool's driver instead of running one process quietly."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
from tokenizers import Tokenizer

from loadgen.errors import LoadgenError, UsageError
from loadgen.results.outcome import PointOutcome
from loadgen.run.driver import Driver, RunPieces, in_process
from loadgen.run.point_records import RunContext
from loadgen.run.sweep import SweepOptions, sweep_points
from tests.support.exact_server import ExactServer, VirtualClock, spec


class Counting:
    """The in-process driver, noting each point it is asked for and each stop."""

    def __init__(self, inner: Driver) -> None:
        self.inner = inner
        self.asked: list[int] = []
        self.stops: list[LoadgenError | None] = []

    async def run_point(self, context: RunContext, conc: int) -> PointOutcome:
        self.asked.append(conc)
        return await self.inner.run_point(context, conc)

    def abandoned(self, stop: LoadgenError | None) -> PointOutcome | None:
        self.stops.append(stop)
        return self.inner.abandoned(stop)


async def test_the_sweep_runs_every_point_through_its_driver(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    drivers: list[Counting] = []

    @contextlib.asynccontextmanager
    async def counting(pieces: RunPieces) -> AsyncIterator[Driver]:
        async with in_process(pieces) as inner:
            drivers.append(Counting(inner))
            yield drivers[-1]

    clock = VirtualClock()
    outcome = await sweep_points(
        spec(tmp_path, conc=(2, 4)),
        SweepOptions(
            tokenizer=tokenizer,
            backend=ExactServer(clock),
            clock=clock,
            sleep=clock.sleep,
            drive=counting,
        ),
    )
    assert outcome.exit_code == 0
    assert len(drivers) == 1  # one driver for the whole run, started once
    assert drivers[0].asked == [2, 4]
    assert [p.conc for p in outcome.points] == [2, 4]
    assert drivers[0].stops == [None]  # asked at the end for a stopped point: none


async def test_the_engine_refuses_workers_without_the_pools_driver(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    clock = VirtualClock()
    with pytest.raises(UsageError, match="--workers 2: this entry point runs one process"):
        await sweep_points(
            spec(tmp_path, conc=(2,), workers=2),
            SweepOptions(
                tokenizer=tokenizer, backend=ExactServer(clock), clock=clock, sleep=clock.sleep
            ),
        )
    assert not (tmp_path / "run.json").exists()  # refused before anything was written
