"""The shards' records on one timeline, and whether their measured spans were one point.

Shards on one machine (same boot id) share CLOCK_MONOTONIC: records are taken as they
are. Across machines each record carries the (monotonic, wall) pair its process read at
the start of the point; records are moved onto the first shard's clock through the wall
clock, with the uncertainty the kernels' NTP estimates give (run/clock.py).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from loadgen.records import RequestRecord
from loadgen.results.run_record import ClockFacts


class PointRefused(Exception):
    """This point's shards cannot be combined; str() says why."""


def align(
    per_shard: Sequence[Sequence[RequestRecord]],
    clocks: Sequence[ClockFacts | None],
) -> tuple[list[RequestRecord], int | None]:
    """All records on the first shard's monotonic clock, and the alignment's uncertainty
    in ns (0 on one machine; None when a clock's error is unknown)."""
    boots = {c.boot_id if c else None for c in clocks}
    if len(boots) == 1 and None not in boots:  # one machine: one CLOCK_MONOTONIC
        return sorted((r for rs in per_shard for r in rs), key=lambda r: r.request_id), 0
    offsets = [r.clock_unix_ns - r.clock_mono_ns for rs in per_shard for r in rs[:1]]
    reference = offsets[0] if offsets else 0
    moved = [
        _shift(r, r.clock_unix_ns - r.clock_mono_ns - reference) for rs in per_shard for r in rs
    ]
    return sorted(moved, key=lambda r: r.request_id), alignment_uncertainty_ns(clocks)


def alignment_uncertainty_ns(clocks: Sequence[ClockFacts | None]) -> int | None:
    """Two machines' wall clocks may differ by both their kernels' error estimates; each
    pairing of clocks adds half its read bracket; a wall-clock step adds its size."""
    known = [c for c in clocks if c is not None and c.synced is True]
    errors_us = [c.esterror_us for c in known if c.esterror_us is not None]
    if len(errors_us) < len(clocks):
        return None
    errors = sorted((e * 1000 for e in errors_us), reverse=True)
    pairing = max(c.pair_read_ns for c in known)  # two half-brackets at most
    steps = max(abs(c.offset_change_ns or 0) for c in known)
    return sum(errors[:2]) + pairing + steps


def _shift(record: RequestRecord, by_ns: int) -> RequestRecord:
    if by_ns == 0:
        return record
    return dataclasses.replace(
        record,
        scheduled_ns=record.scheduled_ns + by_ns,
        start_ns=record.start_ns + by_ns,
        chunk_ns=tuple(t + by_ns for t in record.chunk_ns),
        end_ns=record.end_ns + by_ns,
        clock_mono_ns=record.clock_mono_ns + by_ns,
    )


def check_overlap(
    per_shard: Sequence[Sequence[RequestRecord]],
    aligned: Sequence[RequestRecord],
    uncertainty_ns: int | None,
) -> tuple[tuple[float, float] | None, ...]:
    """Each shard's measured span (s, from the earliest start); PointRefused when the
    shards that sent requests were not all measuring at one time."""
    ids = [{r.request_id for r in rs} for rs in per_shard]
    spans_ns: list[tuple[int, int] | None] = []
    for shard_ids in ids:
        mine = [r for r in aligned if r.request_id in shard_ids]
        spans_ns.append(
            (min(r.start_ns for r in mine), max(r.end_ns for r in mine)) if mine else None
        )
    sending = [s for s in spans_ns if s is not None]
    if not sending:
        raise PointRefused("no shard recorded a request")
    origin = min(start for start, _ in sending)
    first_end = min(end for _, end in sending)
    last_start = max(start for start, _ in sending)
    if first_end - last_start <= (uncertainty_ns or 0):
        raise PointRefused(
            f"the shards did not overlap in time (one started {(last_start - first_end) / 1e9:.3f}"
            f" s after another had finished{_plus_minus(uncertainty_ns)}): they were not one "
            "concurrency point; run the shards at the same time"
        )
    return tuple(
        None if span is None else ((span[0] - origin) / 1e9, (span[1] - origin) / 1e9)
        for span in spans_ns
    )


def _plus_minus(uncertainty_ns: int | None) -> str:
    if uncertainty_ns is None:
        return ", clocks not NTP-synchronized"
    return f", ±{uncertainty_ns / 1e6:.3f} ms" if uncertainty_ns else ""
