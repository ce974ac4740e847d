"""When each request is sent: closed loop (conc slots) or open loop (precomputed arrivals).

`scheduled_ns` is when a request was due: the moment its slot became free (closed loop)
or its intended arrival time (open loop). The transport stamps `start_ns` when the request's
bytes are written to its connection, so `start_ns - scheduled_ns` is queue time (slot wait,
pacing, connection acquisition), never part of TTFT. The clock (and the open loop's sleep)
are passed in, so a test can drive the scheduler on a virtual clock.
"""

from __future__ import annotations

import asyncio
from bisect import bisect_right
from collections.abc import Awaitable, Callable, Sequence
from time import perf_counter_ns

import numpy as np

from loadgen.records import RequestRecord
from loadgen.workload.plan import RequestSpec

# (request, scheduled_ns) -> its record (None when not recorded, e.g. warmup)
Send = Callable[[RequestSpec, int], Awaitable[RequestRecord | None]]
Clock = Callable[[], int]
Sleep = Callable[[float], Awaitable[None]]


def deadline_after(duration_s: float | None, now_ns: int) -> int | None:
    return None if duration_s is None else now_ns + int(duration_s * 1e9)


async def closed_loop(
    requests: Sequence[RequestSpec],
    conc: int,
    send: Send,
    *,
    deadline_ns: int | None = None,
    clock: Clock = perf_counter_ns,
) -> None:
    """`conc` slots; each sends its next request as soon as its previous one has ended."""
    pending = iter(requests)
    point_start = clock()

    async def slot() -> None:
        scheduled = point_start
        for request in pending:  # one shared iterator: requests go out in index order
            if deadline_ns is not None and scheduled >= deadline_ns:
                return
            record = await send(request, scheduled)
            # The slot became free when the previous response ended, not when the client
            # got round to it: the client's own turnaround counts as queue time.
            scheduled = record.end_ns if record is not None and record.end_ns else clock()

    async with asyncio.TaskGroup() as group:
        for _ in range(min(conc, len(requests))):
            group.create_task(slot())


def arrival_offsets_ns(
    count: int, rate: float, burstiness: float, rng: np.random.Generator
) -> list[int]:
    """Intended send times after the point start: gamma gaps with mean 1/rate (shape 1 = Poisson).

    The first request goes at 0; the gaps' coefficient of variation is 1/sqrt(burstiness).
    """
    if count == 0:
        return []
    gaps = rng.gamma(shape=burstiness, scale=1.0 / (rate * burstiness), size=count - 1)
    offsets = np.concatenate(([0.0], np.cumsum(gaps)))
    return [int(v * 1e9) for v in offsets]


async def open_loop(
    requests: Sequence[RequestSpec],
    conc: int,
    send: Send,
    offsets_ns: Sequence[int],
    *,
    deadline_ns: int | None = None,
    clock: Clock = perf_counter_ns,
    sleep: Sleep = asyncio.sleep,
    stop: Callable[[int], bool] | None = None,
) -> None:
    """Send each request at its intended time, at most `conc` in flight.

    A request that finds every slot busy waits; its lateness shows as queue time against
    its intended time, so an overloaded server cannot hide behind a slower arrival rate.
    `stop(now_ns)`, asked before each send, ends the point (the over-saturation stop):
    nothing more is sent and the requests in flight are cancelled (each record ends
    `cancelled`), as the queue they are in would take longer to drain than it took to build.
    """
    slots = asyncio.Semaphore(conc)
    point_start = clock()

    async def run(request: RequestSpec, intended: int) -> None:
        try:
            await send(request, intended)
        finally:
            slots.release()

    in_flight: set[asyncio.Task[None]] = set()
    async with asyncio.TaskGroup() as group:
        for request, offset in zip(requests, offsets_ns, strict=True):
            intended = point_start + offset
            if deadline_ns is not None and intended >= deadline_ns:
                break
            delay = intended - clock()
            if delay > 0:
                await sleep(delay / 1e9)
            await slots.acquire()
            if stop is not None and stop(clock()):
                slots.release()
                for task in in_flight:
                    task.cancel()
                break
            task = group.create_task(run(request, intended))
            in_flight.add(task)
            task.add_done_callback(in_flight.discard)


async def staged_closed_loop(
    requests: Sequence[RequestSpec],
    stages: Sequence[tuple[int, float]],
    send: Send,
    *,
    clock: Clock = perf_counter_ns,
    sleep: Sleep = asyncio.sleep,
) -> float | None:
    """A closed loop whose slot count steps through `stages` ((concurrency, seconds) one
    after another; --conc-stages), ending when they do or the requests run out; returns
    when they ran out (seconds after the start), None when the stages ended first.

    Slot i sends while the stage it is in has more than i slots. The stage is looked up
    once per request, at send time: going down, a slot past the new count finishes its
    request and is not refilled; going up, the new slots start at the stage's start.
    A slot idle for a stage sleeps to the next stage that has it, and that stage's start
    is its scheduled time (when it became free to send).
    """
    pending = iter(requests)
    start = clock()
    bounds = [start]
    for _, seconds in stages:
        bounds.append(bounds[-1] + int(seconds * 1e9))
    counts = [conc for conc, _ in stages]
    ran_out: list[int] = []

    def next_start(slot: int, stage: int) -> int | None:
        """The start of the first stage from `stage` on that has `slot`."""
        return next((bounds[k] for k in range(stage, len(counts)) if counts[k] > slot), None)

    async def slot(i: int) -> None:
        scheduled = start
        while True:
            now = clock()
            stage = bisect_right(bounds, now) - 1
            if stage >= len(counts):
                return
            if counts[stage] <= i:
                wake = next_start(i, stage + 1)
                if wake is None:
                    return
                await sleep((wake - now) / 1e9)
                scheduled = wake
                continue
            request = next(pending, None)
            if request is None:
                ran_out.append(now)
                return
            record = await send(request, scheduled)
            scheduled = record.end_ns if record is not None and record.end_ns else clock()

    async with asyncio.TaskGroup() as group:
        for i in range(min(max(counts), len(requests))):
            group.create_task(slot(i))
    return (min(ran_out) - start) / 1e9 if ran_out else None
