"""A point's figures over consecutive time slices (`--slice-duration`; pure, no I/O).

The point's own figures average over its whole duration; slices show how they moved
within it (a warmup still settling, a stall, a queue building up). Slice k covers
[t0 + k*S, t0 + (k+1)*S), t0 the point's first send; the last slice ends at the last
chunk or request end and may be shorter (its own `duration_s`). Every figure is of the
events inside the slice:

- tokens and chunks: the chunks of completed requests that arrived in the slice
  (their own token counts), so output throughput is tokens arrived / slice length;
- TTFT: of the completed requests whose first token arrived in the slice (from their
  send, as `ttft`); ITL: the chunk gaps (within one request) that ended in the slice;
- requests in flight: every measured request, from its send to its end, averaged over
  the slice's time (`in_flight_mean`) and at its highest (`in_flight_max`);
- server KV-cache usage: the mean of the gauge samples taken in the slice (null when
  none was: no gauge watch, or a slice shorter than its interval).

`stage_slices` cuts the same figures at --conc-stages' boundaries instead, one per stage.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from loadgen.metrics.arrays import FloatArray, IntArray, PointArrays, is_completed
from loadgen.records import RequestRecord
from loadgen.results.point import SliceMetrics


def _pct(values: FloatArray, q: float) -> float | None:
    return float(np.percentile(values, q)) if values.size else None


class _InFlight:
    """Requests in flight over time, from their [start, end) intervals: the running count
    after each start (+1) and end (-1), an end first where one meets a start."""

    def __init__(self, starts: IntArray, ends: IntArray) -> None:
        self.starts, self.ends = starts, ends
        times = np.concatenate((starts, ends))
        deltas = np.concatenate((np.ones_like(starts), -np.ones_like(ends)))
        order = np.lexsort((deltas, times))
        self.times, self.counts = times[order], np.cumsum(deltas[order])

    def over(self, lo: int, hi: int) -> tuple[float, int]:
        """The mean count over [lo, hi) (by time) and its highest."""
        overlap = np.clip(np.minimum(self.ends, hi) - np.maximum(self.starts, lo), 0, None)
        mean = float(overlap.sum()) / (hi - lo)
        at = int(np.searchsorted(self.times, lo, side="right"))
        top = int(self.counts[at - 1]) if at else 0
        inside = self.counts[at : int(np.searchsorted(self.times, hi, side="left"))]
        return mean, max(top, int(inside.max()) if inside.size else 0)


class _Events:
    """Times of one kind of event, sorted, with a value each: a slice is a searchsorted
    range, so k slices cost one sort and k small slices, not k passes over every chunk."""

    def __init__(self, times: IntArray, values: FloatArray) -> None:
        order = np.argsort(times, kind="stable")
        self.times, self.values = times[order], values[order]
        self.cumulative = np.concatenate(([0.0], np.cumsum(self.values)))

    def span(self, lo: int, hi: int) -> tuple[int, int]:
        return (
            int(np.searchsorted(self.times, lo, side="left")),
            int(np.searchsorted(self.times, hi, side="left")),
        )

    def count(self, lo: int, hi: int) -> int:
        a, b = self.span(lo, hi)
        return b - a

    def total(self, lo: int, hi: int) -> float:
        a, b = self.span(lo, hi)
        return float(self.cumulative[b] - self.cumulative[a])

    def within(self, lo: int, hi: int) -> FloatArray:
        a, b = self.span(lo, hi)
        return self.values[a:b]


_NONE = np.zeros(0, dtype=np.int64)


class _PointEvents:
    """Every event the slices count, built once per point."""

    def __init__(
        self, records: Sequence[RequestRecord], kv_samples: Sequence[tuple[int, float]]
    ) -> None:
        done = [r for r in records if is_completed(r)]
        arrays = PointArrays.build(done) if done else None
        starts = np.array([r.start_ns for r in records], dtype=np.int64)
        self.starts = _Events(starts, np.ones(starts.size))
        if arrays is None:
            empty = _Events(_NONE, np.zeros(0))
            self.chunks = self.firsts = self.gaps = self.lasts = empty
        else:
            self.chunks = _Events(arrays.chunk_ns, arrays.chunk_tokens.astype(np.float64))
            self.firsts = _Events(arrays.chunk_ns[arrays.first], arrays.ttft_ms())
            gaps, _ = arrays.itl_per_chunk_ms()
            self.gaps = _Events(arrays.chunk_ns[1:][arrays.gap_is_within_record()], gaps)
            self.lasts = _Events(arrays.chunk_ns[arrays.last], np.ones(arrays.num_records))
        kv = np.array(kv_samples, dtype=np.float64).reshape(-1, 2)
        self.kv = _Events(kv[:, 0].astype(np.int64), kv[:, 1])


def _bounds(records: Sequence[RequestRecord]) -> tuple[IntArray, IntArray]:
    starts = np.array([r.start_ns for r in records], dtype=np.int64)
    ends = np.array(
        [max(r.end_ns, r.chunk_ns[-1] if r.chunk_ns else 0) for r in records], dtype=np.int64
    )
    return starts, ends


def time_slices(
    records: Sequence[RequestRecord], slice_s: float, kv_samples: Sequence[tuple[int, float]] = ()
) -> list[SliceMetrics]:
    """The point's slices of `slice_s` seconds; `kv_samples` are (perf_counter_ns, KV-cache
    usage fraction) gauge readings. No records: no slices."""
    if not records:
        return []
    starts, ends = _bounds(records)
    events = _PointEvents(records, kv_samples)
    t0, t_end = int(starts.min()), max(int(ends.max()), int(starts.min()) + 1)
    step = int(slice_s * 1e9)
    flight = _InFlight(starts, ends)
    los = range(t0, t_end, step)
    return [_slice(events, flight, t0, lo, min(lo + step, t_end), lo == los[-1]) for lo in los]


def stage_slices(
    records: Sequence[RequestRecord],
    stages_s: Sequence[float],
    kv_samples: Sequence[tuple[int, float]] = (),
) -> list[SliceMetrics]:
    """One slice per stage (--conc-stages), on the stages' own boundaries from the point's
    start, which is the earliest `scheduled_ns` (the closed loop's first slots are due
    then). The last stage reached runs on to the point's last event, so the drain after
    the stages is in it; a stage the point never reached (its requests ran out) has none."""
    if not records:
        return []
    starts, ends = _bounds(records)
    events = _PointEvents(records, kv_samples)
    t0 = min(r.scheduled_ns for r in records)
    t_end = max(int(ends.max()), int(starts.min()) + 1)
    flight = _InFlight(starts, ends)
    edges = [t0 + int(s * 1e9) for s in np.cumsum([0.0, *stages_s])]
    los = [lo for lo in edges[:-1] if lo < t_end]
    his = [*edges[1 : len(los)], t_end]
    return [
        _slice(events, flight, t0, lo, hi, k == len(los) - 1)
        for k, (lo, hi) in enumerate(zip(los, his, strict=True))
    ]


def _slice(
    events: _PointEvents, flight: _InFlight, t0: int, lo: int, end: int, closing: bool
) -> SliceMetrics:
    seconds = (end - lo) / 1e9
    hi = end + 1 if closing else end  # the last slice holds what came at the very end
    tokens, finished = int(events.chunks.total(lo, hi)), events.lasts.count(lo, hi)
    ttft, itl, kv = (
        events.firsts.within(lo, hi),
        events.gaps.within(lo, hi),
        events.kv.within(lo, hi),
    )
    mean, top = flight.over(lo, end)
    return SliceMetrics(
        start_s=(lo - t0) / 1e9,
        duration_s=seconds,
        requests_started=events.starts.count(lo, hi),
        requests_completed=finished,
        output_tokens=tokens,
        chunks=events.chunks.count(lo, hi),
        output_throughput=tokens / seconds if seconds > 0 else 0.0,
        request_throughput=finished / seconds if seconds > 0 else 0.0,
        ttft_samples=int(ttft.size),
        p50_ttft_ms=_pct(ttft, 50),
        p99_ttft_ms=_pct(ttft, 99),
        itl_samples=int(itl.size),
        p50_itl_ms=_pct(itl, 50),
        p99_itl_ms=_pct(itl, 99),
        in_flight_mean=mean,
        in_flight_max=top,
        kv_cache_usage_mean=float(kv.mean()) if kv.size else None,
    )
