"""A session run's point: its session figures (metrics/agentic.py) from its records, the
server's counters around the measured phase and the replay's counts (run/sessions.py;
summed over the workers with --workers)."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping

from loadgen.config.spec import RunSpec
from loadgen.run.assemble import PointParts
from loadgen.run.extension import Extension, Measured
from loadgen.run.session_point import session_metrics


class SessionFields(Extension):
    def __init__(self, spec: RunSpec, replay_counts: Callable[[], Mapping[str, int]]) -> None:
        self.spec = spec
        self.replay_counts = replay_counts

    def parts(self, parts: PointParts, measured: Measured) -> PointParts:
        sessions = session_metrics(
            self.spec.session,
            self.spec.scoring.slos_ms,
            measured.records,
            measured.server_before,
            measured.server_after,
            self.replay_counts(),
        )
        return dataclasses.replace(parts, sessions=sessions)
