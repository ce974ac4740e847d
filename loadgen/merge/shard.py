"""One shard of a run as `loadgen merge` reads it: its directory and its run.json."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any


@dataclass(frozen=True, slots=True)
class Shard:
    path: Path
    run: dict[str, Any]  # its run.json

    @property
    def index(self) -> int:
        return int(self.run["shard"]["index"])

    def point(self, conc: int) -> dict[str, Any] | None:
        return next((p for p in self.run["points"] if p["conc"] == conc), None)
