"""The over-saturation stop's live side: what an open-loop point has seen so far, and the
verdict of metrics/saturation.py on it, at most every CHECK_EVERY_NS.

Fed once per finished record (a few appends: nothing per chunk), asked by the open loop
before each send. A verdict stops the sending; the requests in flight end normally.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from loadgen.metrics.saturation import Saturation, SaturationRule, saturation
from loadgen.records import RequestRecord

CHECK_EVERY_NS = 500_000_000


class SaturationWatch:
    def __init__(self, rule: SaturationRule, start_ns: int, offsets_ns: Sequence[int]) -> None:
        self.rule = rule
        self.start_ns = start_ns
        self.due_s = np.sort(np.asarray(offsets_ns, dtype=np.float64)) / 1e9
        self.finished_s: list[float] = []
        self.first_token_s: list[float] = []
        self.ttft_s: list[float] = []
        self.verdict: Saturation | None = None
        self._next_check_ns = start_ns + int(rule.window_s * 1e9)

    def observe(self, record: RequestRecord) -> None:
        self.finished_s.append((record.end_ns - self.start_ns) / 1e9)
        if record.chunk_ns:
            self.first_token_s.append((record.chunk_ns[0] - self.start_ns) / 1e9)
            self.ttft_s.append((record.chunk_ns[0] - record.scheduled_ns) / 1e9)

    def saturated(self, now_ns: int) -> bool:
        """True once the point is over-saturated (the verdict is kept in `verdict`)."""
        if self.verdict is not None:
            return True
        if now_ns < self._next_check_ns:
            return False
        self._next_check_ns = now_ns + CHECK_EVERY_NS
        self.verdict = saturation(
            self.rule,
            (now_ns - self.start_ns) / 1e9,
            self.due_s,
            np.sort(np.asarray(self.finished_s, dtype=np.float64)),
            np.asarray(self.first_token_s, dtype=np.float64),
            np.asarray(self.ttft_s, dtype=np.float64),
        )
        return self.verdict is not None
