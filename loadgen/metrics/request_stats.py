"""The server's own per-request figures (vLLM 0.32 `metrics`, records.py): pure.

Acceptance (`--per-request-spec-decode-metrics`): a third AL source beside the stream and
the /metrics counters, from the completed requests' histograms only, so other traffic on
the server does not count. The point's AL pools the steps, as the counters do:
AL = 1 + sum(accepted) / sum(steps); rate = sum(accepted) / sum(drafted); position i's
rate = the share of steps that accepted more than i drafts. The spread across requests is
each request's own 1 + accepted / steps (requests without a verify step left out).

Timings (`--enable-per-request-metrics`): per request, the client's TTFT (its send to the
first token-bearing chunk) minus the server's TTFT (scheduled -> first token) is what the
server's queue and everything outside the engine (network, HTTP frontend, tokenizing, the
client's own read) added; minus the server's queue time too, what only lies outside it.
The server's span of a request lies inside the client's, so a server that claims more
(queue + TTFT above the client's TTFT, or queue + TTFT + generation above the client's
send to last chunk) sent timings that are not this request's: they are counted
(`server_timings_exceed_client`) and left out of every timing figure, never published
as negative time outside the server.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from loadgen.metrics.arrays import NS_PER_MS, is_completed
from loadgen.records import RequestRecord, ServerTimings, SpecDecodeStats

# The two clocks are one host's (or NTP-close): what the server may claim beyond the
# client's span before it is taken as not this request's (its ms are rounded floats).
TIMING_SLACK_MS = 1.0

SPEC_KEYS = (
    "server_request_acceptance_length",
    "server_request_acceptance_rate",
    "server_request_acceptance_per_position",
    "server_request_spec_requests",
    "server_request_spec_steps",
    "server_request_al_min",
    "server_request_al_p10",
    "server_request_al_median",
    "server_request_al_p90",
    "server_request_al_max",
)
# distributions (metrics/summary.py `distribution`) of these per-request samples, in ms
TIMING_SAMPLES = (
    "server_request_ttft",
    "server_request_queue_time",
    "ttft_minus_server_ttft",
    "ttft_outside_server",
)


def spec_decode_fields(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """Keys SPEC_KEYS from the completed records that carry the server's acceptance."""
    stats = [
        r.server_spec_decode
        for r in records
        if is_completed(r) and r.server_spec_decode is not None
    ]
    result: dict[str, Any] = dict.fromkeys(SPEC_KEYS)
    if not stats:
        return result
    result["server_request_spec_requests"] = len(stats)
    k = max(s.num_spec_tokens for s in stats)
    histogram = np.zeros(k + 1, dtype=np.int64)
    for s in stats:
        histogram[: len(s.acceptance_histogram)] += s.acceptance_histogram
    steps = int(histogram.sum())
    result["server_request_spec_steps"] = steps
    if steps == 0:
        return result
    accepted = int((np.arange(k + 1) * histogram).sum())
    drafted = sum(s.num_draft_tokens for s in stats)
    beyond = np.cumsum(histogram[::-1])[::-1]  # beyond[i]: steps that accepted >= i drafts
    result.update(
        server_request_acceptance_length=1.0 + accepted / steps,
        server_request_acceptance_rate=accepted / drafted if drafted else None,
        server_request_acceptance_per_position=[float(beyond[i + 1]) / steps for i in range(k)],
    )
    result.update(_spread(s for s in stats if s.num_spec_steps))
    return result


def _spread(stats: Iterable[SpecDecodeStats]) -> dict[str, float]:
    lengths = np.array([1.0 + s.num_accepted_draft_tokens / s.num_spec_steps for s in stats])
    low, p10, median, p90, high = np.percentile(lengths, [0, 10, 50, 90, 100])
    return {
        "server_request_al_min": float(low),
        "server_request_al_p10": float(p10),
        "server_request_al_median": float(median),
        "server_request_al_p90": float(p90),
        "server_request_al_max": float(high),
    }


def timing_samples(records: Sequence[RequestRecord]) -> dict[str, np.ndarray[Any, Any]]:
    """Per-request samples (ms) of TIMING_SAMPLES over the completed records that carry
    the server's timings (each sample only where its inputs were sent)."""
    samples: dict[str, list[float]] = {name: [] for name in TIMING_SAMPLES}
    for record in records:
        timings = record.server_timings
        if timings is None or not is_completed(record) or exceeds_client(record, timings):
            continue
        client_ttft = (record.chunk_ns[0] - record.start_ns) / NS_PER_MS
        server_ttft, queue = timings.time_to_first_token_ms, timings.queue_time_ms
        if queue is not None:
            samples["server_request_queue_time"].append(queue)
        if server_ttft is None:
            continue
        samples["server_request_ttft"].append(server_ttft)
        samples["ttft_minus_server_ttft"].append(client_ttft - server_ttft)
        if queue is not None:
            samples["ttft_outside_server"].append(client_ttft - server_ttft - queue)
    return {name: np.array(values, dtype=np.float64) for name, values in samples.items()}


def timing_requests(records: Sequence[RequestRecord]) -> int:
    return sum(1 for r in records if is_completed(r) and r.server_timings is not None)


def exceeds_client(record: RequestRecord, timings: ServerTimings) -> bool:
    """Whether the server claims a longer span than the client measured (see the module)."""
    # Not the generation time against the client's first-to-last chunk alone: a first
    # chunk the frontend sends late shortens the client's span between them while the
    # engine's is unchanged; the whole span still holds.
    client_ttft = (record.chunk_ns[0] - record.start_ns) / NS_PER_MS
    client_e2el = (record.chunk_ns[-1] - record.start_ns) / NS_PER_MS
    inside = (timings.time_to_first_token_ms or 0.0) + (timings.queue_time_ms or 0.0)
    return (
        inside > client_ttft + TIMING_SLACK_MS
        or inside + (timings.generation_time_ms or 0.0) > client_e2el + TIMING_SLACK_MS
    )


def timings_exceeding_client(records: Sequence[RequestRecord]) -> int:
    """Completed requests whose server timings claim more than the client measured."""
    return sum(
        1
        for r in records
        if r.server_timings is not None and is_completed(r) and exceeds_client(r, r.server_timings)
    )
