"""A shard's one connection to the hub (shard 0's own shard connects to it too, so every
shard speaks the same protocol): joins (with retries until --coordinator-wait), lines
up each point's start, carries the other shards' stops, and hands in the results.

The sweep sees it as a `ShardLink` (run/shard_sync.py): `wait(conc)` is the start
barrier, `watch()` raises as soon as the run must stop because of another shard or a
lost coordinator. Its reader never raises: what it learns is kept for those two.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path
from typing import Any

from loadgen.errors import UsageError
from loadgen.run.shard_sync import CoordinatorLost, ShardStopped
from loadgen.scale.coordinator import wire
from loadgen.scale.coordinator.hub import BEAT_S, BEATS_LOST_S

RETRY_S = 0.5  # between attempts to reach a coordinator that does not listen yet
ANSWER_WAIT_S = 30.0  # for the hub's answer to our Hello
JOIN_GRACE_S = 5.0
SWEPT = 0  # the barrier after the last point (every point's conc is 1 or more)


class ShardRefused(UsageError):
    """The coordinator refused this shard: another version, other settings, its index
    taken; or its secret is not the coordinator's."""


class Link:
    def __init__(
        self,
        address: str,
        index: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        results_dir: Path,
    ) -> None:
        self.address = address
        self.index = index
        self.reader, self.writer = reader, writer
        self.results_dir = results_dir
        self.heard = time.monotonic()
        self.problem: ShardStopped | CoordinatorLost | None = None
        self.stopped_by_other = False
        self.changed = asyncio.Event()  # set (and replaced) whenever something arrived
        self.go: set[int] = set()
        self.received = False
        self.joined = False
        self.run_id: str | None = None  # shard 0's, once every shard joined
        self._tasks: list[asyncio.Task[None]] = []

    # -- the ShardLink the sweep uses --

    async def wait(self, conc: int) -> None:
        await self._send(wire.Ready(conc))
        await self._until(lambda: conc in self.go)

    async def watch(self) -> None:
        await self._until(lambda: False)

    # -- around the sweep --

    async def join(self, deadline: float) -> None:
        """Wait until every shard joined (nothing is sent to the server before)."""
        self._tasks = [asyncio.create_task(self._read()), asyncio.create_task(self._beat())]
        try:  # the hub names the missing shards at the deadline: its word comes first
            async with asyncio.timeout_at(deadline + JOIN_GRACE_S):
                await self._until(lambda: self.joined)
        except TimeoutError:
            raise CoordinatorLost(
                f"--coordinator {self.address}: not every shard joined within "
                "--coordinator-wait; start all N shards"
            ) from None

    async def abort(self, line: str) -> None:
        """This shard stops the run: every other shard is told (unless the stop came
        from another shard, or the coordinator is gone)."""
        if self.problem is None:
            with contextlib.suppress(ConnectionError, OSError):
                await self._send(wire.Abort(line))

    async def hand_in(self) -> None:
        """Send this shard's result files to shard 0 and wait for its receipt: once every
        shard's sweep is over (a barrier of its own, conc 0), so no transfer competes with
        a shard still measuring; at once when the run stopped (no shard measures then)."""
        await self._send(wire.Ready(SWEPT))
        await self._until(lambda: SWEPT in self.go or self.problem is not None, lost_only=True)
        if self.index != 0:
            for path in sorted(p for p in self.results_dir.rglob("*") if p.is_file()):
                await self._send_file(path)
        await self._send(wire.HandedIn())
        await self._until(lambda: self.received, lost_only=True)

    async def _send_file(self, path: Path) -> None:
        name = path.relative_to(self.results_dir).as_posix()
        with path.open("rb") as source:
            first = True
            while True:
                data = source.read(wire.CHUNK)
                if not data and not first:
                    return
                await self._send(wire.ResultChunk(name, data, first))
                first = False

    async def close(self) -> None:
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        self.writer.close()
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.wait_closed()

    # -- inside --

    async def _send(self, message: wire.Message) -> None:
        try:
            await wire.send(self.writer, message)
        except (ConnectionError, OSError):
            self._lose("its connection broke")
            raise self._raised() from None

    def _raised(self) -> ShardStopped | CoordinatorLost:
        assert self.problem is not None
        return self.problem

    async def _until(self, condition: Any, *, lost_only: bool = False) -> None:
        while not condition():
            if self.problem is not None and (
                not lost_only or isinstance(self.problem, CoordinatorLost)
            ):
                raise self.problem
            changed = self.changed
            await changed.wait()

    def _notify(self) -> None:
        self.changed.set()
        self.changed = asyncio.Event()

    def _lose(self, why: str) -> None:
        if self.problem is None:
            self.problem = CoordinatorLost(
                f"the coordinator (shard 0 at {self.address}) is gone: {why}; this shard's "
                f"results are kept in {self.results_dir}"
            )
        self._notify()

    async def _read(self) -> None:
        while True:
            try:
                message = await wire.receive(self.reader)
            except (wire.FrameError, OSError):
                message = None
            if message is None:
                self._lose("its connection closed")
                return
            self.heard = time.monotonic()
            match message:
                case wire.AllJoined(run_id):
                    self.joined, self.run_id = True, run_id
                case wire.Go(conc):
                    self.go.add(conc)
                case wire.Stop(index, line):
                    if self.problem is None:
                        self.stopped_by_other = True
                        self.problem = ShardStopped(f"shard {index} stopped the run: {line}")
                case wire.Received():
                    self.received = True
                case _:
                    pass  # beats
            self._notify()

    async def _beat(self) -> None:
        while True:
            await asyncio.sleep(BEAT_S)
            if time.monotonic() - self.heard > BEATS_LOST_S:
                self._lose(f"silent for {BEATS_LOST_S:.0f} s")
                return
            with contextlib.suppress(ConnectionError, OSError):
                await wire.send(self.writer, wire.Beat())


async def _attempt(
    host: str, port: int, hello: wire.Hello
) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, wire.Message | None]:
    """One connection and the hub's answer to our Hello (None: closed without one)."""
    reader, writer = await asyncio.open_connection(host, port)
    try:
        await wire.send(writer, hello)
        async with asyncio.timeout(ANSWER_WAIT_S):
            answer = await wire.receive(reader, reset_is_end=False)
    except (TimeoutError, wire.FrameError):
        answer = None
    except OSError:
        writer.close()
        raise
    return reader, writer, answer


async def connect(
    host: str,
    port: int,
    hello: wire.Hello,
    results_dir: Path,
    deadline: float,
) -> Link:
    """A proven, welcomed link; retries until `deadline` while nobody listens (refused,
    unresolvable, or reset: a proxy or load balancer in front of a hub not up yet)."""
    address = f"{host}:{port}"
    last = ""
    while True:
        try:
            reader, writer, answer = await _attempt(host, port, hello)
            break
        except OSError as exc:
            last = exc.strerror or str(exc)
        if time.monotonic() + RETRY_S > deadline:
            raise CoordinatorLost(
                f"--coordinator {address}: unreachable within --coordinator-wait (last: "
                f"{last}); is shard 0 running, and is the address right?"
            )
        await asyncio.sleep(RETRY_S)
    if isinstance(answer, wire.Refused):
        writer.close()
        raise ShardRefused(f"--coordinator {address} refused shard {hello.index}: {answer.reason}")
    if not isinstance(answer, wire.Welcome):
        writer.close()
        raise ShardRefused(
            f"--coordinator {address}: closed the connection without answering; the "
            "coordinator answers only shards with its secret: give every shard the same "
            "--coordinator-token"
        )
    return Link(address, hello.index, reader, writer, results_dir)
