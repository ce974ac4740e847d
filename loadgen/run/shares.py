"""Which part of a concurrency point one client process runs (workers, shards).

A point of concurrency C has C slots, numbered 0..C-1, and request i belongs to slot
i mod C: in a closed loop each slot sends its requests one after another, so giving a
process whole slots (and each slot's requests) keeps every process busy for the same
time and the union of all processes exactly the single-process point: the same request
indices, the same prompts (built from the seed, whoever builds them) and C streams.
Slots go to shards round-robin (slot j -> shard j mod N), then each shard's slots to its
workers the same way, so a `--shard I/N --workers W` run is reproducible with any W.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Share:
    """Shard `shard` of `shards`, worker `worker` of `workers` within that shard."""

    shard: int = 0
    shards: int = 1
    worker: int = 0
    workers: int = 1

    def shard_slots(self, conc: int) -> tuple[int, ...]:
        """The slots of this process's shard (all its workers)."""
        return tuple(range(self.shard, conc, self.shards))

    def slots(self, conc: int) -> tuple[int, ...]:
        """The slots this process runs."""
        return self.shard_slots(conc)[self.worker :: self.workers]

    def owner(self, conc: int) -> Callable[[int], bool]:
        """request index -> whether this process sends it."""
        mine = frozenset(self.slots(conc))
        return lambda index: index % conc in mine

    @property
    def process(self) -> int:
        """This process's place among all the run's processes (shards x workers): slot j
        is its exactly when j % processes == process (slots() above, in one number)."""
        return self.shard + self.shards * self.worker

    @property
    def processes(self) -> int:
        return self.shards * self.workers

    @property
    def label(self) -> str:
        return f"shard {self.shard}/{self.shards} worker {self.worker}/{self.workers}"

    def worker_share(self, worker: int, workers: int) -> Share:
        return Share(self.shard, self.shards, worker, workers)


def requests_in(total: int, conc: int, slots: tuple[int, ...]) -> int:
    """How many of requests 0..total-1 belong to `slots` (request i in slot i mod conc)."""
    full, rest = divmod(total, conc)
    return full * len(slots) + sum(1 for slot in slots if slot < rest)
