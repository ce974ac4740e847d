"""`--coordinator HOST:PORT`: the shards of a run meet over the network instead of in a
shared directory (docs/workers-and-shards.md).

Shard 0 runs the hub (hub.py) and, like every shard, one link to it (link.py), over the
protocol of wire.py. `meet` joins the run before anything is sent to the server, and
gives the sweep its `ShardLink`; after the sweep, each shard hands its result files in
and shard 0 has them all, ready for `loadgen merge`'s merge (orchestrate/coordinated.py).

Bound on a stop: a shard that fails, is interrupted or whose process dies is seen by the
hub at once (its Abort, or its connection closing) and every other shard's point stops
when the hub's Stop reaches it: one network hop and the point's cancellation, well
under STOP_BOUND_S (tests measure it). A shard whose machine falls silent without
closing its connection is taken as gone after BEATS_LOST_S, so its stop takes at most
BEATS_LOST_S + BEAT_S + STOP_BOUND_S.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen import __version__
from loadgen.config.spec import RunSpec
from loadgen.results.results_dir import settings_of
from loadgen.run.shard_sync import ShardStopped
from loadgen.scale.coordinator import wire
from loadgen.scale.coordinator.hub import BEAT_S, BEATS_LOST_S, Hub
from loadgen.scale.coordinator.link import Link, ShardRefused, connect

STOP_BOUND_S = 1.0

__all__ = ["BEATS_LOST_S", "BEAT_S", "STOP_BOUND_S", "Meeting", "ShardRefused", "meet"]


@dataclass(slots=True)
class Meeting:
    link: Link
    hub: Hub | None  # shard 0's

    async def gathered(self) -> tuple[list[Path], list[int]]:
        """Shard 0, after its own sweep: every shard's result directory (its own first)
        and the indices of the shards whose results never arrived."""
        assert self.hub is not None
        await self.hub.settled.wait()
        arrived = set(self.hub.gathered())
        count = self.hub.count
        dirs = [self.link.results_dir] + [
            self.hub.shard_dir(i) for i in range(1, count) if i in arrived
        ]
        return dirs, [i for i in range(1, count) if i not in arrived]


def _settings(spec: RunSpec) -> dict[str, Any]:
    return settings_of(spec)


@contextlib.asynccontextmanager
async def meet(spec: RunSpec, results_dir: Path) -> AsyncIterator[Meeting]:
    """This shard joined to all the others (shard 0 hosting the hub)."""
    processes = spec.processes
    assert processes.coordinator_host is not None and processes.coordinator_token is not None
    deadline = time.monotonic() + processes.coordinator_wait_s
    host, port, token = (
        processes.coordinator_host,
        processes.coordinator_port,
        processes.coordinator_token,
    )
    settings = _settings(spec)
    async with contextlib.AsyncExitStack() as stack:
        hub = None
        if processes.shard_index == 0:
            hub = Hub(
                host,
                port,
                token,
                __version__,
                settings,
                processes.shard_count,
                results_dir,
                processes.coordinator_wait_s,
            )
            await hub.start()
            stack.push_async_callback(hub.close)
        hello = wire.hello(
            token, __version__, processes.shard_index, processes.shard_count, settings
        )
        link = await connect(host, port, hello, results_dir, deadline)
        stack.push_async_callback(link.close)
        try:
            await link.join(deadline)
        except ShardStopped:
            if hub is not None:
                await hub.linger(deadline)
            raise
        yield Meeting(link, hub)
