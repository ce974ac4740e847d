"""The server watch (run/server_watch.py) settles before a point is called complete: a
point is never written complete while the server may be gone."""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.records import RequestRecord
from loadgen.run.extension import Extension
from loadgen.run.server_watch import ServerWatch


class ServerSettled(Extension):
    def __init__(self, watch: ServerWatch) -> None:
        self.watch = watch

    async def after_measure(self, records: Sequence[RequestRecord]) -> None:
        await self.watch.settled()
