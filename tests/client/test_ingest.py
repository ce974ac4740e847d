"""The ingest parses in short slices and lets the event loop run in between."""

from __future__ import annotations

import asyncio
from time import perf_counter_ns

import pytest

from loadgen.client import ingest as ingest_module
from loadgen.client.ingest import QUIET_NS, Ingest
from loadgen.client.native.protocol import StreamProtocol
from loadgen.run.loop_health import LoopLag


class SlowStream:
    """Stands in for a BodyStream whose drain costs `cost_ns` of CPU (no I/O involved)."""

    def __init__(self, cost_ns: int, log: list[str], name: str) -> None:
        self.queued = False
        self.cost_ns = cost_ns
        self.log = log
        self.name = name

    def drain(self) -> None:
        end = perf_counter_ns() + self.cost_ns
        while perf_counter_ns() < end:
            pass
        self.log.append(self.name)


class Clock:
    """perf_counter_ns as the ingest reads it, moved only by the drains' costs."""

    def __init__(self) -> None:
        self.now_ns = 1_000_000_000

    def __call__(self) -> int:
        return self.now_ns


class CostedStream(SlowStream):
    """A drain that costs `cost_ns` on `clock`: the slices' length, with no busy wait."""

    def __init__(self, clock: Clock, cost_ns: int, log: list[str], name: str) -> None:
        super().__init__(cost_ns, log, name)
        self.clock = clock

    def drain(self) -> None:
        self.clock.now_ns += self.cost_ns
        self.log.append(self.name)


async def test_ingest_yields_to_the_loop_between_slices(monkeypatch: pytest.MonkeyPatch) -> None:
    clock = Clock()
    monkeypatch.setattr(ingest_module, "perf_counter_ns", clock)
    log: list[str] = []
    ingest = Ingest(slice_ns=200_000)
    streams = [CostedStream(clock, 100_000, log, f"s{i}") for i in range(10)]
    for stream in streams:
        ingest.notify(stream, clock() - QUIET_NS)  # between bursts: full slices
        ingest.notify(stream, clock() - QUIET_NS)  # queued once only
    asyncio.get_running_loop().call_soon(log.append, "loop")  # e.g. a socket read
    await asyncio.sleep(0)
    await asyncio.sleep(0)
    # a slice of 200 us ends at the first drain past it (the third, of 100 us each): the
    # loop runs, then the next slice; the streams drain once each, in order
    assert log[:7] == ["s0", "s1", "s2", "loop", "s3", "s4", "s5"], log
    await asyncio.sleep(0.01)
    assert [x for x in log if x != "loop"] == [s.name for s in streams]
    assert not any(s.queued for s in streams)


class BrokenStream(SlowStream):
    def drain(self) -> None:
        self.log.append(self.name)
        raise RuntimeError("a drain that failed")


async def test_a_drain_that_raises_does_not_strand_the_streams_behind_it() -> None:
    """httptools' HttpParserUpgrade once escaped a drain: every stream queued behind it
    stayed `queued` and was never parsed again."""
    log: list[str] = []
    errors: list[object] = []
    loop = asyncio.get_running_loop()
    loop.set_exception_handler(lambda _loop, context: errors.append(context["exception"]))
    ingest = Ingest()
    streams = [BrokenStream(0, log, "broken"), SlowStream(0, log, "a"), SlowStream(0, log, "b")]
    for stream in streams:
        ingest.notify(stream)
    await asyncio.sleep(0.01)
    loop.set_exception_handler(None)
    assert log == ["broken", "a", "b"] and len(errors) == 1
    assert not any(s.queued for s in streams)


async def test_ingest_parses_briefly_while_reads_arrive() -> None:
    """Mid-burst the loop goes back to its sockets after each short turn (here: one
    stream); once no read came for QUIET_NS, the ingest parses in full slices."""
    log: list[str] = []
    ingest = Ingest(slice_ns=50_000_000, busy_slice_ns=0)
    streams = [SlowStream(0, log, f"s{i}") for i in range(6)]
    loop = asyncio.get_running_loop()
    # three reads: a burst. Stamped a second ahead, so that a drain that runs late (the
    # process descheduled for over QUIET_NS on a busy machine: CI) still sees the burst.
    for stream in streams[:3]:
        ingest.notify(stream, perf_counter_ns() + 1_000_000_000)
    loop.call_soon(log.append, "poll")
    await asyncio.sleep(0.01)
    assert log[:4] == ["s0", "poll", "s1", "s2"]  # one stream per turn while reads arrive
    log.clear()
    for stream in streams[3:]:
        ingest.notify(stream, perf_counter_ns() - QUIET_NS)
    loop.call_soon(log.append, "poll")
    await asyncio.sleep(0.01)
    assert log == ["s3", "s4", "s5", "poll"]  # quiet: one slice took them all


async def test_the_ingest_is_paced_by_when_reads_happen_not_by_arrival_stamps() -> None:
    """A kernel stamp says when bytes arrived (maybe long before the read): whether reads
    are still coming in is the read time's to say."""
    ingest = Ingest()
    protocol = StreamProtocol()
    protocol.begin(asyncio.get_running_loop(), ingest)
    read_ns = perf_counter_ns()
    protocol.received(b"HTTP/1.1 200 OK\r\n", read_ns - 10 * QUIET_NS, read_ns)
    assert ingest.last_read_ns == read_ns
    protocol.received(b"content-length: 0\r\n", read_ns - 9 * QUIET_NS, read_ns + 1)
    assert ingest.last_read_ns == read_ns + 1  # already queued: the newest read still counts


@pytest.mark.exclusive
async def test_loop_lag_sees_a_blocked_loop() -> None:
    """Subject: the loop-lag monitor's readings on the real clock: a loop blocked 60 ms
    reads >= 50 ms, an idle one under 20 ms; both printed, run alone."""
    monitor = LoopLag(interval_s=0.005)
    monitor.start()
    await asyncio.sleep(0.03)
    idle = max(monitor.samples)
    monitor.probe()  # an arrival now would wait behind what the loop does next:
    end = perf_counter_ns() + 60_000_000
    while perf_counter_ns() < end:  # the client loop blocked for 60 ms
        pass
    await asyncio.sleep(0.03)
    health = monitor.stop()
    print(
        f"loop lag: idle {idle / 1e6:.2f} ms, blocked 60 ms -> {health.max_ms} ms "
        f"({len(monitor.samples)} samples)"
    )
    assert health.max_ms is not None and health.max_ms >= 50
    assert idle < 20_000_000 and len(monitor.samples) >= 5


async def test_start_pacer_spreads_starts_over_loop_turns() -> None:
    from loadgen.client.ingest import StartPacer

    pacer = StartPacer(per_turn=3)
    order: list[str] = []

    async def start(name: str) -> None:
        await pacer.turn()
        order.append(name)

    async with asyncio.TaskGroup() as group:
        for i in range(7):
            group.create_task(start(f"r{i}"))
        # a socket read that becomes ready meanwhile: runs between the paced starts
        asyncio.get_running_loop().call_soon(order.append, "poll")
    assert sorted(x for x in order if x != "poll") == [f"r{i}" for i in range(7)]
    assert [x for x in order if x != "poll"] == [f"r{i}" for i in range(7)]  # FIFO
    assert 0 < order.index("poll") <= 3  # not after all seven starts
