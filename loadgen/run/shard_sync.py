"""`--shard-sync DIR`: shards start each point's measured phase together.

Shards run independently, so a shard whose share of a point is shorter (fewer slots, a
faster warmup) moves on to the next point early, and its points drift away from the
others' until they no longer overlap (`loadgen merge` refuses such points). With a
directory every shard can write (the shared volume the results go to), each shard,
once warmed up, writes `conc_<C>/ready.<I>` holding its wall clock and waits for all N;
then every shard starts at the latest of those times plus START_DELAY_S, read on its own
wall clock. The start is as simultaneous as the machines' clocks agree (NTP).

The coordinator (`--coordinator`, scale/coordinator/) is the other variant of the same
seam: a `ShardLink` both lines the points up and carries the other shards' stops; the
run picks one of them once (features/__init__.py) and never asks which it has.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from typing import Protocol

import orjson

from loadgen.errors import LoadgenError, SetupError, UsageError
from loadgen.results.files import write_atomic

POLL_S = 0.05
START_DELAY_S = 0.5  # shared volumes (NFS) may show a new file a little late
TIMEOUT_S = 3600.0  # a shard an hour behind is not coming


class StartBarrier(Protocol):
    async def wait(self, conc: int) -> None:
        """Return when every shard has warmed up for `conc`: the measured phase starts."""
        ...


class ShardLink(StartBarrier, Protocol):
    """The shards of a run that meet over the network (scale/coordinator/)."""

    async def watch(self) -> None:
        """Run beside the sweep; raise ShardStopped or CoordinatorLost when the run must
        stop because of another shard (never returns otherwise)."""
        ...


class ShardStopped(LoadgenError):
    """Another shard of the run stopped (failed, interrupted, killed): so does this one."""

    stop_reason = "shard_stopped"


class CoordinatorLost(SetupError):
    """Shard 0, which coordinates the run, is gone (or never answered)."""

    stop_reason = "coordinator_lost"


class ShardBarrier:
    def __init__(
        self, directory: Path, index: int, count: int, timeout_s: float = TIMEOUT_S
    ) -> None:
        self.directory = directory
        self.index = index
        self.count = count
        self.timeout_s = timeout_s

    def check_fresh(self) -> None:
        """A previous run's files would release the barrier at once: refuse them."""
        stale = sorted(self.directory.glob(f"conc_*/ready.{self.index}"))
        if stale:
            raise UsageError(
                f"--shard-sync {self.directory}: holds a previous run's files "
                f"({stale[0]}); give each run an empty directory"
            )

    async def wait(self, conc: int) -> None:
        point = self.directory / f"conc_{conc}"
        write_atomic(point / f"ready.{self.index}", orjson.dumps({"unix_ns": time.time_ns()}))
        deadline = time.monotonic() + self.timeout_s
        while True:
            ready = [point / f"ready.{i}" for i in range(self.count)]
            if all(path.exists() for path in ready):
                break
            if time.monotonic() > deadline:
                missing = [i for i, path in enumerate(ready) if not path.exists()]
                raise SetupError(
                    f"--shard-sync: shard(s) {missing} did not reach conc {conc} "
                    f"within {self.timeout_s:.0f} s"
                )
            await asyncio.sleep(POLL_S)
        latest = max(orjson.loads(path.read_bytes())["unix_ns"] for path in ready)
        delay_ns = latest + int(START_DELAY_S * 1e9) - time.time_ns()
        if delay_ns > 0:
            await asyncio.sleep(delay_ns / 1e9)
