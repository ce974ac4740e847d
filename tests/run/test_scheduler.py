"""The two schedulers' timing rules (run/scheduler.py): the open loop's seeded arrival
offsets, the closed loop's slots, and when each request is due."""

from __future__ import annotations

import asyncio
from time import perf_counter_ns

import numpy as np

from loadgen.run.scheduler import arrival_offsets_ns, closed_loop, open_loop
from loadgen.workload.plan import RequestSpec


def test_arrival_offsets() -> None:
    rng = np.random.default_rng(1)
    offsets = np.array(arrival_offsets_ns(20001, rate=100.0, burstiness=1.0, rng=rng))
    gaps = np.diff(offsets) / 1e9
    assert offsets[0] == 0 and abs(gaps.mean() - 0.01) < 0.0005
    assert abs(gaps.std() / gaps.mean() - 1.0) < 0.05  # Poisson: CV 1
    bursty = np.diff(arrival_offsets_ns(20001, 100.0, 0.25, np.random.default_rng(1))) / 1e9
    assert abs(bursty.std() / bursty.mean() - 2.0) < 0.15  # gamma shape k: CV 1/sqrt(k)


def requests(n: int) -> list[RequestSpec]:
    return [RequestSpec(i, 1, 1, b"") for i in range(n)]


async def test_closed_loop_slots() -> None:
    in_flight, peak, log = 0, 0, []

    async def send(request: RequestSpec, scheduled: int) -> None:
        nonlocal in_flight, peak
        start = perf_counter_ns()
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.002 * (1 + request.index % 3))
        in_flight -= 1
        log.append((request.index, scheduled, start, perf_counter_ns()))
        return None

    await closed_loop(requests(12), 3, send)
    assert peak == 3 and sorted(i for i, *_ in log) == list(range(12))
    ends = sorted(end for *_, end in log)
    for _, scheduled, start, _ in log:
        assert 0 <= start - scheduled < 20_000_000  # sent as soon as its slot was free
    # after the first wave, every request was due the moment an earlier one ended
    later = sorted(s for i, s, _, _ in log if i >= 3)
    assert all(any(0 <= s - e < 1_000_000 for e in ends) for s in later)


async def test_closed_loop_duration_stops_new_requests() -> None:
    sent = []

    async def send(request: RequestSpec, scheduled: int) -> None:
        sent.append(request.index)
        await asyncio.sleep(0.01)

    await closed_loop(requests(100), 2, send, deadline_ns=perf_counter_ns() + 35_000_000)
    assert 4 <= len(sent) <= 10  # 2 slots x 10 ms requests in 35 ms (fewer when loaded)


async def test_open_loop_intended_times_and_cap() -> None:
    offsets = [0, 5_000_000, 5_000_000, 5_000_000, 40_000_000]
    log = []

    async def send(request: RequestSpec, scheduled: int) -> None:
        log.append((request.index, scheduled, perf_counter_ns()))
        await asyncio.sleep(0.02)

    await open_loop(requests(5), 2, send, offsets)
    log.sort()
    for index, scheduled, start in log:  # due exactly at the precomputed offsets
        assert start >= scheduled and scheduled - log[0][1] == offsets[index]
    # request 3 was due at 5 ms but both slots were busy until ~20 ms: queued, not dropped
    assert log[3][2] - log[3][1] > 10_000_000
    assert log[4][2] - log[4][1] < 15_000_000  # on time once a slot was free


async def test_closed_loop_slot_free_at_previous_response_end() -> None:
    """The next request is due when the previous response ended, not when the client
    finished its bookkeeping: that turnaround shows as queue time."""
    from loadgen.records import RequestRecord, TokenSource

    ends: dict[int, int] = {}
    scheduled_of: dict[int, int] = {}

    async def send(request: RequestSpec, scheduled: int) -> RequestRecord:
        scheduled_of[request.index] = scheduled
        await asyncio.sleep(0.002)
        ends[request.index] = end = perf_counter_ns()
        await asyncio.sleep(0.003)  # client-side turnaround after the stream ended
        return RequestRecord(
            request.index,
            1,
            1,
            1,
            scheduled,
            scheduled,
            0,
            (end,),
            (1,),
            end,
            TokenSource.TOKEN_IDS,
        )

    await closed_loop(requests(3), 1, send)
    assert scheduled_of[1] == ends[0] and scheduled_of[2] == ends[1]
