"""--shard-sync or --coordinator: once warmed up, each point waits for the other shards
before it measures."""

from __future__ import annotations

from loadgen.run.extension import Extension
from loadgen.run.shard_sync import StartBarrier


class ShardStart(Extension):
    def __init__(self, barrier: StartBarrier, conc: int) -> None:
        self.barrier = barrier
        self.conc = conc

    async def after_warmup(self) -> None:
        await self.barrier.wait(self.conc)
