"""One shard of a run as `loadgen merge` reads it: its directory and its run.json."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from loadgen.results.run_record import PointEntry, RunRecord


@dataclass(frozen=True, slots=True)
class Shard:
    path: Path
    run: RunRecord  # its run.json (load_shards checked it has shard information)

    @property
    def index(self) -> int:
        assert self.run.shard is not None and self.run.shard.index is not None
        return self.run.shard.index

    @property
    def count(self) -> int:
        assert self.run.shard is not None
        return self.run.shard.count

    def point(self, conc: int) -> PointEntry | None:
        return self.run.point(conc)
