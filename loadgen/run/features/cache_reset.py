"""--reset-prefix-cache: the servers' prefix caches emptied before each point's warmup (or
after it, --reset-after-warmup); the outcome is the point's `cache_state`. A failed
reset does not stop the point: its file says so."""

from __future__ import annotations

import dataclasses
import sys

from loadgen.results.point import CacheState
from loadgen.run.assemble import PointParts
from loadgen.run.cache_control import CacheControl
from loadgen.run.extension import Extension, Measured


class CacheReset(Extension):
    def __init__(self, control: CacheControl, conc: int, *, after_warmup: bool) -> None:
        self.control = control
        self.conc = conc
        self.after_warmup_ = after_warmup
        self.state = CacheState()  # uncontrolled until a reset says otherwise

    async def before_warmup(self) -> None:
        if not self.after_warmup_:
            await self._reset()

    async def after_warmup(self) -> None:
        if self.after_warmup_:
            await self._reset()

    async def _reset(self) -> None:
        self.state = await self.control.reset()
        if self.state.cache_state == "reset_failed":
            print(
                f"loadgen: WARNING: conc {self.conc}: prefix cache not reset: "
                f"{self.state.cache_reset_detail}",
                file=sys.stderr,
            )

    def parts(self, parts: PointParts, measured: Measured) -> PointParts:
        return dataclasses.replace(parts, cache=self.state)
