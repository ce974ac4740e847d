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
        inside = self.counts[at:int(np.searchsorted(self.times, hi, side="left"))]
        return mean, max(top, int(inside.max()) if inside.size else 0)


def time_slices(records: Sequence[RequestRecord], slice_s: float,
                kv_samples: Sequence[tuple[int, float]] = ()) -> list[SliceMetrics]:
    """The point's slices of `slice_s` seconds; `kv_samples` are (perf_counter_ns, KV-cache
    usage fraction) gauge readings. No records: no slices."""
    if not records:
        return []
    starts = np.array([r.start_ns for r in records], dtype=np.int64)
    ends = np.array([max(r.end_ns, r.chunk_ns[-1] if r.chunk_ns else 0) for r in records],
                    dtype=np.int64)
    done = [r for r in records if is_completed(r)]
    arrays = PointArrays.build(done) if done else None
    t0, t_end = int(starts.min()), int(ends.max())
    step = int(slice_s * 1e9)
    kv = np.array(kv_samples, dtype=np.float64).reshape(-1, 2)
    flight = _InFlight(starts, ends)
    t_end = max(t_end, t0 + 1)
    los = range(t0, t_end, step)
    return [_slice(arrays, flight, kv, t0, lo, min(lo + step, t_end), lo == los[-1])
            for lo in los]


def _slice(arrays: PointArrays | None, flight: _InFlight, kv: FloatArray, t0: int, lo: int,
           end: int, closing: bool) -> SliceMetrics:
    seconds = (end - lo) / 1e9
    hi = end + 1 if closing else end  # the last slice holds what came at the very end
    tokens = chunks = finished = 0
    ttft = itl = np.zeros(0, dtype=np.float64)
    if arrays is not None:
        here = (arrays.chunk_ns >= lo) & (arrays.chunk_ns < hi)
        tokens, chunks = int(arrays.chunk_tokens[here].sum()), int(here.sum())
        firsts = arrays.chunk_ns[arrays.first]
        first_here = (firsts >= lo) & (firsts < hi)
        ttft = arrays.ttft_ms()[first_here]
        gaps_end = arrays.chunk_ns[1:][arrays.gap_is_within_record()]
        gaps, _ = arrays.itl_per_chunk_ms()
        itl = gaps[(gaps_end >= lo) & (gaps_end < hi)]
        lasts = arrays.chunk_ns[arrays.last]
        finished = int(((lasts >= lo) & (lasts < hi)).sum())
    mean, top = flight.over(lo, end)
    in_kv = (kv[:, 0] >= lo) & (kv[:, 0] < hi) if kv.size else np.zeros(0, dtype=np.bool_)
    return SliceMetrics(
        start_s=(lo - t0) / 1e9, duration_s=seconds,
        requests_started=int(((flight.starts >= lo) & (flight.starts < hi)).sum()),
        requests_completed=finished, output_tokens=tokens, chunks=chunks,
        output_throughput=tokens / seconds if seconds > 0 else 0.0,
        request_throughput=finished / seconds if seconds > 0 else 0.0,
        ttft_samples=int(ttft.size), p50_ttft_ms=_pct(ttft, 50), p99_ttft_ms=_pct(ttft, 99),
        itl_samples=int(itl.size), p50_itl_ms=_pct(itl, 50), p99_itl_ms=_pct(itl, 99),
        in_flight_mean=mean, in_flight_max=top,
        kv_cache_usage_mean=float(kv[in_kv, 1].mean()) if in_kv.any() else None)

