"""A point's load shape: one type per shape, picked once from the RunSpec by `load_shape`.

As k6 picks an executor, the shape alone decides how a point's measured requests go out;
nothing else asks which shape a run has. The closed shapes give the scheduler slots (a
fixed count, or --conc-stages' steps); the open ones (a fixed rate, vLLM's ramp-up,
--rate-stages) give it each request's intended send time, drawn from the RNG passed in,
so the same seed gives the same schedule (`offsets_ns` is pure).
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import ClassVar, Protocol

import numpy as np

from loadgen.config.spec import RunSpec
from loadgen.run.scheduler import (
    Clock,
    Send,
    Sleep,
    arrival_offsets_ns,
    closed_loop,
    deadline_after,
    open_loop,
    staged_closed_loop,
)
from loadgen.workload.plan import RequestSpec, point_rng
from loadgen.workload.ramp import ramp_offsets_ns, ramp_rates, staged_offsets_ns

ARRIVALS = 3  # rng stream id for open-loop arrival times

# an open shape's arrival offsets (this process's) -> its over-saturation stop, if any
Watch = Callable[[Sequence[int]], Callable[[int], bool] | None]


@dataclass(frozen=True, slots=True)
class Phase:
    """What a point hands its shape for the measured phase."""

    conc: int  # the point's concurrency (its label)
    requests: Sequence[RequestSpec]  # this process's measured requests, in index order
    planned: int  # the whole point's measured requests, every process's
    slots: int  # this process's slots
    send: Send
    clock: Clock
    sleep: Sleep
    rng: np.random.Generator  # the point's arrival stream (open shapes draw from it)
    watch: Watch


@dataclass(frozen=True, slots=True)
class ClosedLoop:
    """`conc` slots, each sending its next request when its previous one ends."""

    duration_s: float | None  # --duration: no new request after it
    rate_label: ClassVar[float | str] = "inf"  # vLLM's request_rate of a closed loop
    # sends as slots free up, so the simulator's step model can say what a point takes
    closed: ClassVar[bool] = True

    async def measure(self, phase: Phase) -> None:
        deadline = deadline_after(self.duration_s, phase.clock())
        await closed_loop(
            phase.requests, phase.slots, phase.send, deadline_ns=deadline, clock=phase.clock
        )


@dataclass(frozen=True, slots=True)
class ConcStages:
    """--conc-stages: a closed loop whose slot count steps (in flight, seconds) in turn,
    in one process (RunSpec checks), so its slots are the point's."""

    stages: tuple[tuple[int, float], ...]
    duration_s: float | None  # the stages' sum
    rate_label: ClassVar[float | str] = "inf"
    closed: ClassVar[bool] = True

    async def measure(self, phase: Phase) -> None:
        ran_out = await staged_closed_loop(
            phase.requests, self.stages, phase.send, clock=phase.clock, sleep=phase.sleep
        )
        if ran_out is not None:
            _say_stages_short(phase.conc, len(phase.requests), ran_out, self.duration_s)


@dataclass(frozen=True, slots=True)
class OpenLoop:
    """--request-rate: gamma arrivals of mean gap 1/rate (shape `burstiness`, 1 = Poisson)."""

    rate: float
    burstiness: float
    duration_s: float | None
    closed: ClassVar[bool] = False

    @property
    def rate_label(self) -> float | str:
        return self.rate

    def offsets_ns(self, count: int, rng: np.random.Generator) -> list[int]:
        return arrival_offsets_ns(count, self.rate, self.burstiness, rng)

    async def measure(self, phase: Phase) -> None:
        await _on_arrivals(self, phase)


@dataclass(frozen=True, slots=True)
class Ramp:
    """vLLM's --ramp-up-strategy: each request's rate interpolated over the request count."""

    strategy: str  # linear | exponential
    start_rps: float
    end_rps: float
    burstiness: float
    duration_s: float | None
    rate_label: ClassVar[float | str] = "ramp"
    closed: ClassVar[bool] = False

    def offsets_ns(self, count: int, rng: np.random.Generator) -> list[int]:
        rates = ramp_rates(count, self.strategy, self.start_rps, self.end_rps)
        return ramp_offsets_ns(rates, self.burstiness, rng)

    async def measure(self, phase: Phase) -> None:
        await _on_arrivals(self, phase)


@dataclass(frozen=True, slots=True)
class RateStages:
    """--rate-stages: gamma arrivals at each (req/s, seconds) stage's rate in turn."""

    stages: tuple[tuple[float, float], ...]
    burstiness: float
    duration_s: float | None  # the stages' sum
    rate_label: ClassVar[float | str] = "stages"
    closed: ClassVar[bool] = False

    def offsets_ns(self, count: int, rng: np.random.Generator) -> list[int]:
        return staged_offsets_ns(self.stages, self.burstiness, rng, count)

    async def measure(self, phase: Phase) -> None:
        await _on_arrivals(self, phase)


LoadShape = ClosedLoop | ConcStages | OpenLoop | Ramp | RateStages


def load_shape(spec: RunSpec) -> LoadShape:
    """The shape the run's settings make: the one place that asks (RunSpec's checks
    allow one of --conc-stages, --ramp-up-strategy, --rate-stages, --request-rate)."""
    load = spec.load
    if load.conc_stages:
        return ConcStages(load.conc_stages, load.point_duration_s)
    if load.ramp_up_strategy is not None:
        assert load.ramp_up_start_rps is not None and load.ramp_up_end_rps is not None
        return Ramp(
            load.ramp_up_strategy,
            load.ramp_up_start_rps,
            load.ramp_up_end_rps,
            load.burstiness,
            load.point_duration_s,
        )
    if load.rate_stages:
        return RateStages(load.rate_stages, load.burstiness, load.point_duration_s)
    if load.request_rate is not None:
        return OpenLoop(load.request_rate, load.burstiness, load.point_duration_s)
    return ClosedLoop(load.point_duration_s)


def arrivals_rng(spec: RunSpec, conc: int) -> np.random.Generator:
    """The point's own arrival stream, apart from its prompts'."""
    return point_rng(spec, conc, ARRIVALS)


class Arrivals(Protocol):
    @property
    def duration_s(self) -> float | None: ...

    def offsets_ns(self, count: int, rng: np.random.Generator) -> list[int]: ...


async def _on_arrivals(shape: Arrivals, phase: Phase) -> None:
    """An open shape's phase: each request at its intended time, at most `slots` in flight."""
    deadline = deadline_after(shape.duration_s, phase.clock())
    # The whole point's arrival times (a share keeps its requests' own), so the union
    # of all processes' arrivals is the single-process one.
    offsets = shape.offsets_ns(phase.planned, phase.rng)
    mine = offsets_for(phase.requests, offsets)
    await open_loop(
        phase.requests,
        phase.slots,
        phase.send,
        mine,
        deadline_ns=deadline,
        clock=phase.clock,
        sleep=phase.sleep,
        stop=phase.watch(mine),
    )


def offsets_for(requests: Sequence[RequestSpec], offsets: Sequence[int]) -> list[int]:
    """Each request's own arrival offset (requests carry their index in the point)."""
    return [offsets[request.index] for request in requests]


def _say_stages_short(conc: int, planned: int, at_s: float, stages_s: float | None) -> None:
    """Running out of requests cuts the stages short: never silently."""
    print(
        f"loadgen: conc {conc}: the point's {planned} requests ran out {at_s:.1f} s into "
        f"--conc-stages' {stages_s:g} s, so the stages after that were not run as asked; "
        "raise --num-prompts",
        file=sys.stderr,
    )
