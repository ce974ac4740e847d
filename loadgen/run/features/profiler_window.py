"""--profile-conc: the server's profiler opened just before the chosen points' measured
phases (after the warmup and any cache reset) and closed after them, also when the point
was stopped. The point is profiled from the moment the start is sent: even a start that
failed may have taken effect. A failure is the point's `profile_error`, never the run's
end."""

from __future__ import annotations

import dataclasses
import sys

import msgspec

from loadgen.client.server_profiler import Refused, Unanswered
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
        self._unanswered = False  # the start got no answer: the window may be open

    async def before_measure(self) -> None:
        prefix = profile_prefix(self.run_id, self.conc)
        trace = f"{prefix}_* {self.profiler.where}"
        self.state = ProfileState(profiled=True, profile_prefix=prefix, profile_trace=trace)
        self._open = True
        match await self.profiler.start(prefix):
            case None:
                pass
            case Refused(why):
                self._open = False
                self.state = ProfileState(profile_error=f"start: {why} (no window opened)")
                self._warn(f"start: {why}: no window opened, the point is measured unprofiled")
            case Unanswered(why):
                self._unanswered = True
                self.state = ProfileState(
                    profiled=True,
                    profile_prefix=prefix,
                    profile_error=f"start: {why} (the window may have opened: trace files "
                    f"{trace} may have been written)",
                )
                self._warn(
                    f"start: {why}: the server may have opened the window, so the point "
                    "counts as profiled; a stop is sent after it"
                )

    async def close(self) -> None:
        if not self._open:
            return
        self._open = False
        error = await self.profiler.stop()
        if error is not None:
            self._failed(f"stop: {error}")
            return
        if self._unanswered:
            print(
                f"loadgen: conc {self.conc}: the profiler window's start was not answered: "
                f"the server may have profiled the point and written trace files "
                f"{profile_prefix(self.run_id, self.conc)}_* {self.profiler.where}",
                file=sys.stderr,
            )
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
        self._warn(why)

    def _warn(self, why: str) -> None:
        print(f"loadgen: WARNING: conc {self.conc}: profiler window {why}", file=sys.stderr)

    def parts(self, parts: PointParts, measured: Measured) -> PointParts:
        return dataclasses.replace(parts, profile=self.state)
