"""--shard-sync: once warmed up, each point waits for the other shards before it measures."""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from loadgen.run.extension import Extension


class ShardStart(Extension):
    def __init__(self, barrier: Callable[[int], Awaitable[None]], conc: int) -> None:
        self.barrier = barrier
        self.conc = conc

    async def after_warmup(self) -> None:
        await self.barrier(self.conc)
