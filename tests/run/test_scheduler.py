"""The two schedulers' timing rules (run/scheduler.py): the open loop's seeded arrival
offsets, the closed loop's slots, and when each request is due.

The rules are checked on a virtual clock (tests/support/virtual_time.py): each request's
send and end are exact instants, so a rule broken by one millisecond fails, and a busy
machine cannot fail a correct scheduler. The open loop's pacing on the real clock, whose
subject is timing, is checked once alone (`exclusive`), with its lateness printed."""

from __future__ import annotations

import asyncio
from time import perf_counter_ns

import numpy as np
import pytest

from loadgen.records import RequestRecord, TokenSource
from loadgen.run.scheduler import arrival_offsets_ns, closed_loop, open_loop
from loadgen.workload.plan import RequestSpec
from tests.support.virtual_time import START_NS, clock, run

MS = 1_000_000


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


def test_closed_loop_slots() -> None:
    in_flight, peak = 0, 0
    log: list[tuple[int, int, int, int]] = []  # (index, scheduled, sent, ended)

    async def send(request: RequestSpec, scheduled: int) -> None:
        nonlocal in_flight, peak
        start = clock()
        in_flight += 1
        peak = max(peak, in_flight)
        await asyncio.sleep(0.002 * (1 + request.index % 3))
        in_flight -= 1
        log.append((request.index, scheduled, start, clock()))
        return None

    run(closed_loop(requests(12), 3, send, clock=clock))
    assert peak == 3 and sorted(i for i, *_ in log) == list(range(12))
    for _, scheduled, start, _ in log:
        assert start == scheduled  # sent the moment its slot was free
    # the first wave was due at the start; every later request the moment an earlier ended
    assert sorted(s for i, s, _, _ in log if i < 3) == [START_NS] * 3
    ends = {end for *_, end in log}
    assert all(s in ends for i, s, _, _ in log if i >= 3)


def test_closed_loop_duration_stops_new_requests() -> None:
    sent: list[int] = []  # when each request went out, after the start

    async def send(request: RequestSpec, scheduled: int) -> None:
        sent.append(clock() - START_NS)
        await asyncio.sleep(0.01)

    run(closed_loop(requests(100), 2, send, deadline_ns=START_NS + 35 * MS, clock=clock))
    # 2 slots x 10 ms requests: each slot sends at 0, 10, 20 and 30 ms, none at 40 ms
    assert sorted(sent) == [t * MS for t in (0, 0, 10, 10, 20, 20, 30, 30)]


def test_open_loop_intended_times_and_cap() -> None:
    offsets = [0, 5 * MS, 5 * MS, 5 * MS, 40 * MS]
    log: list[tuple[int, int, int]] = []  # (index, scheduled, sent)

    async def send(request: RequestSpec, scheduled: int) -> None:
        log.append((request.index, scheduled, clock()))
        await asyncio.sleep(0.02)

    run(open_loop(requests(5), 2, send, offsets, clock=clock))
    log.sort()
    assert [scheduled - START_NS for _, scheduled, _ in log] == offsets  # due at the offsets
    # 2 slots of 20 ms: requests 2 and 3, due at 5 ms, queue (not dropped) until requests
    # 0 and 1 end at 20 and 25 ms; request 4 goes on time once a slot is free
    assert [start - START_NS for *_, start in log] == [t * MS for t in (0, 5, 20, 25, 40)]


def test_closed_loop_slot_free_at_previous_response_end() -> None:
    """The next request is due when the previous response ended, not when the client
    finished its bookkeeping: that turnaround shows as queue time."""
    ends: dict[int, int] = {}
    scheduled_of: dict[int, int] = {}

    async def send(request: RequestSpec, scheduled: int) -> RequestRecord:
        scheduled_of[request.index] = scheduled
        await asyncio.sleep(0.002)
        ends[request.index] = end = clock()
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

    run(closed_loop(requests(3), 1, send, clock=clock))
    assert scheduled_of[1] == ends[0] and scheduled_of[2] == ends[1]
    assert ends[1] - ends[0] == 5 * MS  # the turnaround passed: it is not the clock that stood


@pytest.mark.exclusive
async def test_open_loop_paces_on_the_real_clock() -> None:
    """Subject: the open loop's pacing on the real clock with its defaults (perf_counter_ns
    and asyncio.sleep): no request goes out before it is due, and how late each goes is
    printed (run alone: another test's load would be what it measures)."""
    offsets = [i * 5 * MS for i in range(40)]
    late: list[int] = []

    async def send(request: RequestSpec, scheduled: int) -> None:
        late.append(perf_counter_ns() - scheduled)

    await open_loop(requests(len(offsets)), 4, send, offsets)
    lateness = sorted(late)
    print(
        f"open loop, 40 requests 5 ms apart: lateness median {lateness[20] / 1e3:.0f} us, "
        f"max {lateness[-1] / 1e3:.0f} us"
    )
    assert len(late) == 40 and lateness[0] >= 0, f"sent early: {lateness[0]} ns"
    # a loop that slipped by a gap at each send would be a gap late by the median
    assert lateness[20] < 5 * MS, f"median {lateness[20] / 1e6:.1f} ms late"
