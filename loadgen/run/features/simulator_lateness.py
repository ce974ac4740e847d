"""--sim: how late the simulator loadgen started ran over each point's measured phase (its
'behind its step schedule' lines), so a point measured against a late simulator says so."""

from __future__ import annotations

import dataclasses

from loadgen.run.assemble import PointParts
from loadgen.run.embedded_sim import SimulatorLog
from loadgen.run.extension import Extension, Measured


class SimulatorLateness(Extension):
    def __init__(self, log: SimulatorLog) -> None:
        self.log = log
        self.mark: int | None = None  # the log's end when the measured phase began

    def measure_started(self) -> None:
        self.mark = self.log.mark()

    def parts(self, parts: PointParts, measured: Measured) -> PointParts:
        if self.mark is None:
            return parts
        return dataclasses.replace(parts, simulator=self.log.lateness_since(self.mark))
