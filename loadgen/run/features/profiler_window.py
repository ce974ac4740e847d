"""--profile-conc: the server's profiler opened just before the chosen points' measured
phases (after the warmup and any cache reset) and closed after them, also when the point
was stopped. The point is profiled from the moment the start is sent: even a start that
failed may have taken effect. A failure is the point's `profile_error`, never the run's
end."""

from __future__ import annotations

import dataclasses
import sys

import msgspec

from loadgen.results.point import ProfileState
from loadgen.run.assemble import PointParts
from loadgen.run.extension import Extension, Measured
from loadgen.run.profiler_control import ProfilerControl, profile_prefix


class ProfilerWindow(Extension):
    def __init__(self, profiler: ProfilerControl, run_id: str, conc: int) -> None:
        self.profiler = profiler
        self.run_id = run_id
        self.conc = conc
        self.state = ProfileState()
        self._open = False  # a window is open (or its start is under way)

    async def before_measure(self) -> None:
        prefix = profile_prefix(self.run_id, self.conc)
        self.state = ProfileState(
            profiled=True, profile_prefix=prefix, profile_trace=f"{prefix}_* {self.profiler.where}"
        )
        self._open = True
        error = await self.profiler.start(prefix)
        if error is not None:
            self._failed(f"start: {error}")

    async def close(self) -> None:
        if not self._open:
            return
        self._open = False
        error = await self.profiler.stop()
        if error is not None:
            self._failed(f"stop: {error}")
            return
        print(
            f"loadgen: conc {self.conc}: profiled (its numbers are a slowed server's); "
            f"the server wrote its trace files {self.state.profile_trace}",
            file=sys.stderr,
        )

    def _failed(self, why: str) -> None:
        before = self.state.profile_error
        self.state = msgspec.structs.replace(
            self.state, profile_error=f"{before}; {why}" if before else why
        )
        print(f"loadgen: WARNING: conc {self.conc}: profiler window {why}", file=sys.stderr)

    def parts(self, parts: PointParts, measured: Measured) -> PointParts:
        return dataclasses.replace(parts, profile=self.state)
