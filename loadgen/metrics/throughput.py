"""Throughput over the point's duration and over its steady window.

Duration (InferenceX-compatible): first send to last completion = earliest `start_ns` of
any request to the latest `end_ns` of any request, failed ones included (they held a
slot). Token totals count completed requests only, as vLLM does.

Steady window: the span during which all `conc` slots are busy. A request is in flight
over [start_ns, end_ns). The window opens at the first instant `conc` requests are in
flight and closes at the last instant the in-flight count drops below `conc` again. The
hand-off dips between one request ending and the slot's next request starting (a few
microseconds) fall inside it on purpose: the slot is not idle, only changing hands.
Ramp-up (slots filling) and drain (the last requests finishing with nothing left to
send) are outside it. Inside it:
- output tokens = tokens of chunks (of completed requests) that arrived in the window;
- requests = completed requests whose end falls in the window;
- input tokens = input lengths of completed requests whose first chunk (end of prefill)
  arrived in the window.
The steady fields are None when `conc` requests were never in flight at once (fewer
requests than slots, or an open-loop rate that never filled them).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from loadgen.metrics.arrays import PointArrays
from loadgen.records import RequestRecord

NS_PER_S = 1e9


def in_flight_steps(
    starts: np.ndarray[Any, Any], ends: np.ndarray[Any, Any]
) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """Event times and the in-flight count just after each event (ends before starts on ties)."""
    times = np.concatenate([starts, ends])
    deltas = np.concatenate([np.ones(starts.size, np.int64), -np.ones(ends.size, np.int64)])
    order = np.lexsort((deltas, times))
    return times[order], np.cumsum(deltas[order])


def steady_window(
    starts: np.ndarray[Any, Any], ends: np.ndarray[Any, Any], conc: int
) -> tuple[int, int] | None:
    """(open_ns, close_ns) of the span with all `conc` slots busy, or None (module doc)."""
    times, counts = in_flight_steps(starts, ends)
    busy = np.flatnonzero(counts >= conc)
    if busy.size == 0 or busy[-1] + 1 >= times.size:
        return None
    opened, closed = int(times[busy[0]]), int(times[busy[-1] + 1])
    return (opened, closed) if closed > opened else None


def _rates(
    prefix: str,
    requests: int,
    inputs: int,
    outputs: int,
    seconds: float | None,
    num_gpus: int | None,
) -> dict[str, float | None]:
    def per(value: float) -> float | None:
        return value / seconds if seconds else None

    def per_gpu(value: float | None) -> float | None:
        return value / num_gpus if value is not None and num_gpus else None

    output, total = per(outputs), per(inputs + outputs)
    return {
        f"{prefix}request_throughput": per(requests),
        f"{prefix}output_throughput": output,
        f"{prefix}input_throughput": per(inputs),
        f"{prefix}total_token_throughput": total,
        f"{prefix}output_throughput_per_gpu": per_gpu(output),
        f"{prefix}total_token_throughput_per_gpu": per_gpu(total),
    }


def _steady_fields(
    arrays: PointArrays, window: tuple[int, int] | None, origin_ns: int, num_gpus: int | None
) -> dict[str, Any]:
    if window is None:
        return {
            "steady_window_start_s": None,
            "steady_window_duration": None,
            **_rates("steady_", 0, 0, 0, None, num_gpus),
        }
    opened, closed = window
    chunk_in = (arrays.chunk_ns >= opened) & (arrays.chunk_ns < closed)
    end_in = (arrays.end_ns >= opened) & (arrays.end_ns < closed)
    first_ns = arrays.chunk_ns[arrays.first]
    prefill_in = (first_ns >= opened) & (first_ns < closed)
    seconds = (closed - opened) / NS_PER_S
    return {
        "steady_window_start_s": (opened - origin_ns) / NS_PER_S,
        "steady_window_duration": seconds,
        **_rates(
            "steady_",
            int(np.count_nonzero(end_in)),
            int(arrays.input_len[prefill_in].sum()),
            int(arrays.chunk_tokens[chunk_in].sum()),
            seconds,
            num_gpus,
        ),
    }


def measured_window(records: Sequence[RequestRecord]) -> tuple[int, int] | None:
    """The point's window on the monotonic clock: first send to last completion (the
    `duration` of every throughput figure, and the window energy is integrated over)."""
    if not records:
        return None
    return min(r.start_ns for r in records), max(r.end_ns for r in records)


def throughput_fields(
    records: Sequence[RequestRecord], arrays: PointArrays, conc: int, num_gpus: int | None
) -> dict[str, Any]:
    """duration, totals, vLLM throughput fields (+ per GPU), peak rates and the steady window."""
    total_input = int(arrays.input_len.sum())
    total_output = int(arrays.output_tokens.sum())
    if not records:
        return {
            "duration": None,
            "total_input_tokens": 0,
            "total_output_tokens": 0,
            **_rates("", 0, 0, 0, None, num_gpus),
            "max_concurrent_requests": 0,
            "max_output_tokens_per_s": None,
            **_steady_fields(arrays, None, 0, num_gpus),
        }
    starts = np.fromiter((r.start_ns for r in records), np.int64, count=len(records))
    ends = np.fromiter((r.end_ns for r in records), np.int64, count=len(records))
    origin = int(starts.min())
    seconds = (int(ends.max()) - origin) / NS_PER_S
    _, counts = in_flight_steps(starts, ends)
    per_second = np.bincount(
        (arrays.chunk_ns - origin) // int(NS_PER_S), weights=arrays.chunk_tokens
    )
    return {
        "duration": seconds,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        **_rates("", arrays.num_records, total_input, total_output, seconds, num_gpus),
        "max_concurrent_requests": int(counts.max()),
        "max_output_tokens_per_s": float(per_second.max()) if per_second.size else None,
        **_steady_fields(arrays, steady_window(starts, ends, conc), origin, num_gpus),
    }
