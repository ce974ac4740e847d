"""What runs a point: the `Driver` the sweep calls, and the two that run it in this process.

The sweep (run/sweep.py) goes through its points with one driver and knows nothing of
how a point's load is made. Closed and open loop are not drivers of their own: they
differ only in the plan's arrivals, which `Point` reads. A session run plays trees
instead (run/session_point.py). The worker pool (scale/pool_driver.py) implements the
same protocol over worker processes; the engine never imports it: whoever starts a run
picks the driver (scale/sweep.py), and --trials wraps any of them (run/trials.py).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Protocol

from tokenizers import Tokenizer

from loadgen.errors import LoadgenError
from loadgen.results.outcome import PointOutcome
from loadgen.run.features import Features
from loadgen.run.features.session_fields import SessionFields
from loadgen.run.lifecycle import PointLife
from loadgen.run.point import Point
from loadgen.run.point_records import PointRecords, RunContext
from loadgen.run.session_point import SessionPoint, replay_counts, session_replay
from loadgen.run.shares import Share
from loadgen.run.stops import stop_of
from loadgen.workload.plan import Workload
from loadgen.workload.session_plan import SessionSource


class Driver(Protocol):
    async def run_point(self, context: RunContext, conc: int) -> PointOutcome:
        """Measure point `conc` (`context`: the run's, or a --trials trial's) and write
        it. A point that stops early on its own (over-saturation) is returned; one stopped
        by cancellation or a run-level error raises, and `abandoned` hands over what it
        measured."""
        ...

    def abandoned(self, stop: LoadgenError | None) -> PointOutcome | None:
        """The point that was in progress when the run stopped for `stop`, written
        `complete: false`; None when none was, or it had measured nothing."""
        ...


@dataclass(frozen=True, slots=True)
class RunPieces:
    """What a driver is built from, once the server has answered the preflight."""

    context: RunContext
    workload: Workload  # the probe's, under the server's body options
    sessions: SessionSource | None  # a session run's trees (then `workload` is the probe's)
    tokenizer: Tokenizer
    features: Features = field(default_factory=Features)  # each point's extensions


# Starts a driver for a run, and stops whatever it started when the run ends.
Drive = Callable[[RunPieces], AbstractAsyncContextManager[Driver]]


class Lives:
    """The point in progress, so that a run that stops writes it with what it measured."""

    def __init__(self) -> None:
        self.current: PointLife | None = None

    async def run(self, life: PointLife) -> PointOutcome:
        self.current = life
        outcome = await life.run()
        self.current = None
        return outcome

    def abandoned(self, stop: LoadgenError | None) -> PointOutcome | None:
        life, self.current = self.current, None
        return life.abandoned(stop_of(stop)) if life is not None else None


class SingleTurn(Lives):
    """Closed or open loop in this process: the point's plan (this shard's share of it)."""

    def __init__(self, workload: Workload, share: Share, features: Features) -> None:
        super().__init__()
        self.workload = workload
        self.share = share
        self.features = features

    async def run_point(self, context: RunContext, conc: int) -> PointOutcome:
        share = self.share
        keep = share.owner(conc) if share.shards > 1 else None
        workload = self.workload.reseeded(context.spec.seed) if context.trial else self.workload
        plan = await asyncio.to_thread(workload.point, conc, keep)

        def send(records: PointRecords) -> Point:
            return Point(
                context,
                plan,
                on_record=records.add,
                on_warmup=records.add_warmup,
                slots=len(share.slots(conc)),
                label=share.label,
                stopped=records.sending_stopped,
            )

        return await self.run(
            PointLife(context, conc, send, self.features.for_point(context, conc))
        )


class Sessions(Lives):
    """A session run in this process: every lane of the point's trees."""

    def __init__(self, sessions: SessionSource, tokenizer: Tokenizer, features: Features) -> None:
        super().__init__()
        self.sessions = sessions
        self.tokenizer = tokenizer
        self.features = features

    async def run_point(self, context: RunContext, conc: int) -> PointOutcome:
        spec = context.spec
        share = Share(spec.processes.shard_index, spec.processes.shard_count)
        replay = await session_replay(context, conc, self.sessions, self.tokenizer, share)

        def send(records: PointRecords) -> SessionPoint:
            return SessionPoint(
                context,
                conc,
                replay,
                on_record=records.add,
                on_warmup=records.add_warmup,
                share=share,
            )

        fields = SessionFields(context.spec, lambda: replay_counts(replay.stats))
        extensions = self.features.for_point(context, conc, (fields,))
        return await self.run(PointLife(context, conc, send, extensions))


@contextlib.asynccontextmanager
async def in_process(pieces: RunPieces) -> AsyncIterator[Driver]:
    """The driver of a run in this one process (--workers 1)."""
    if pieces.sessions is not None:
        yield Sessions(pieces.sessions, pieces.tokenizer, pieces.features)
        return
    spec = pieces.context.spec
    share = Share(spec.processes.shard_index, spec.processes.shard_count)
    yield SingleTurn(pieces.workload, share, pieces.features)
