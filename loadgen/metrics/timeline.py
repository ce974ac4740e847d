"""One bar per request of a point, for the report's request timeline (pure, no I/O).

As vLLM's `--plot-timeline`: each request from its send to its first token (TTFT) and
from there to its last chunk (decode), in seconds after the point's first send, in send
order. A failed request is one bar from its send to its end, marked failed.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from loadgen.metrics.arrays import is_completed
from loadgen.records import RequestRecord


@dataclass(frozen=True, slots=True)
class TimelineBar:
    request_id: int
    start_s: float
    first_token_s: float | None  # None: failed (no TTFT)
    end_s: float  # the last chunk (completed) or the request's end (failed)
    ok: bool


def request_timeline(records: Sequence[RequestRecord]) -> list[TimelineBar]:
    if not records:
        return []
    t0 = min(r.start_ns for r in records)
    bars = []
    for r in sorted(records, key=lambda r: (r.start_ns, r.request_id)):
        done = is_completed(r)
        bars.append(
            TimelineBar(
                r.request_id,
                (r.start_ns - t0) / 1e9,
                (r.chunk_ns[0] - t0) / 1e9 if done else None,
                ((r.chunk_ns[-1] if done else r.end_ns) - t0) / 1e9,
                done,
            )
        )
    return bars
