"""Records whose connection, after they were written, got bytes no request asked for
(client/native/protocol.py): made malformed when the point ends, in its result and its
JSONL (rewritten whole: rare, only a server answering out of step). With --workers, what
the workers found reaches `found` as they send it (scale/pool.py)."""

from __future__ import annotations

from collections.abc import Mapping

from loadgen.client.transport import tainted
from loadgen.records import RequestRecord
from loadgen.run.backend import Backend
from loadgen.run.extension import Extension


class Taints(Extension):
    def __init__(self, backend: Backend) -> None:
        self.backend = backend
        self.found: dict[tuple[int, int], str] = {}  # (request_id, start_ns) -> why

    def add(self, found: Mapping[tuple[int, int], str]) -> None:
        """Another process's connections showed these out of step."""
        self.found.update(found)

    def settle_records(self, records: list[RequestRecord]) -> bool:
        found = {**self.found, **self.backend.take_tainted()}
        changed = False
        for i, record in enumerate(records):
            why = found.get((record.request_id, record.start_ns))
            if why is not None and record.ok:
                records[i] = tainted(record, why)
                changed = True
        return changed
