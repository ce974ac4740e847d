"""A Dynamo frontend's own series: a fourth timing source beside the client, the engine
workers' histograms and the per-request stats (pure).

Names and definitions from ai-dynamo/dynamo lib/llm/src/http/service/metrics.rs at
79a21ca4f5200e76a2bcc19580eb6176298c7e59 (the default prefix `dynamo_frontend`; the
DYN_METRICS_PREFIX override is not followed): TTFT from the HTTP handler's start to the
first token-bearing response (tokenizing, routing, the worker's queue and prefill
inside); the inter-token histogram observes each response's gap divided by its tokens
once per token, so its mean is per token, not per chunk; request_duration_seconds from
the handler's start to the end of the response. A frontend URL is one of the
`--server-metrics` URLs: its series are summed with no other (workers have none).
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any

from loadgen.metrics.server import ServerSnapshot, counter_delta

FRONTEND_PREFIX = "dynamo_frontend_"
FRONTEND_HISTOGRAMS: Mapping[str, str] = MappingProxyType(
    {
        "frontend_mean_ttft_ms": "dynamo_frontend_time_to_first_token_seconds",
        "frontend_mean_itl_per_token_ms": "dynamo_frontend_inter_token_latency_seconds",
        "frontend_mean_e2el_ms": "dynamo_frontend_request_duration_seconds",
    }
)
FRONTEND_REQUESTS = "dynamo_frontend_requests_total"
FRONTEND_KEYS = (*FRONTEND_HISTOGRAMS, "frontend_requests")


def frontend_fields(before: ServerSnapshot | None, after: ServerSnapshot | None) -> dict[str, Any]:
    """Keys FRONTEND_KEYS: the frontend's means over the point (ms) from its histograms'
    _sum/_count deltas, and the requests it counted (every status); None without a
    frontend among the scraped URLs or when it saw nothing during the point."""
    result: dict[str, Any] = dict.fromkeys(FRONTEND_KEYS)
    if before is None or after is None:
        return result
    for key, histogram in FRONTEND_HISTOGRAMS.items():
        total = counter_delta(before, after, histogram + "_sum")
        count = counter_delta(before, after, histogram + "_count")
        result[key] = None if total is None or not count else 1000.0 * total / count
    requests = counter_delta(before, after, FRONTEND_REQUESTS)
    result["frontend_requests"] = None if requests is None else int(requests)
    return result
