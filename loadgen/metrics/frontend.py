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
# The frontend's KV router's series, served on the frontend's HTTP port beside its own
# (tests/fixtures/dynamo_1.4.2/router_kv_frontend_metrics.txt, `--router-mode kv`).
ROUTER_PREFIX = "dynamo_component_router_"
FRONTEND_SERIES = (FRONTEND_PREFIX, ROUTER_PREFIX)  # no engine's: kept by every dialect
FRONTEND_HISTOGRAMS: Mapping[str, str] = MappingProxyType(
    {
        "frontend_mean_ttft_ms": "dynamo_frontend_time_to_first_token_seconds",
        "frontend_mean_itl_per_token_ms": "dynamo_frontend_inter_token_latency_seconds",
        "frontend_mean_e2el_ms": "dynamo_frontend_request_duration_seconds",
    }
)
FRONTEND_REQUESTS = "dynamo_frontend_requests_total"
# Prefix hits as Dynamo sees them. The router's kv_hit_rate is observed once per routed
# request: the share of the request's blocks the chosen worker holds, as the router
# predicts it at routing time (measured on the real 1.4.2 frontend: a turn of 408 tokens
# whose previous turn and reply, 340 tokens, were sent before reads 5/7 = 5 full 64-token
# blocks of ceil(408/64)); so its mean is per request, not per token, and a prediction.
# cached_tokens is what the workers report as cached, per request (the mocker reports
# none: its count stays 0).
ROUTER_KV_HIT_RATE = "dynamo_component_router_kv_hit_rate"
FRONTEND_CACHED_TOKENS = "dynamo_frontend_cached_tokens"
FRONTEND_INPUT_TOKENS = "dynamo_frontend_input_sequence_tokens"
PREFIX_KEYS = (
    "router_kv_hit_rate",
    "router_routed_requests",
    "frontend_cached_tokens",
    "frontend_prefix_hit_rate",
    "frontend_prefix_null_reason",
)
FRONTEND_KEYS = (*FRONTEND_HISTOGRAMS, "frontend_requests", *PREFIX_KEYS)


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
    result.update(prefix_fields(before, after))
    return result


def prefix_fields(before: ServerSnapshot, after: ServerSnapshot) -> dict[str, Any]:
    """Keys PREFIX_KEYS: the router's mean predicted KV hit rate per routed request and
    the requests it routed; the cached tokens the workers reported and their share of
    the input tokens, null with the reason when not every request reported them."""
    result: dict[str, Any] = dict.fromkeys(PREFIX_KEYS)
    rates = counter_delta(before, after, ROUTER_KV_HIT_RATE + "_sum")
    routed = counter_delta(before, after, ROUTER_KV_HIT_RATE + "_count")
    if routed is not None:
        result["router_routed_requests"] = int(routed)
        result["router_kv_hit_rate"] = rates / routed if rates is not None and routed else None
    cached = counter_delta(before, after, FRONTEND_CACHED_TOKENS + "_sum")
    reported = counter_delta(before, after, FRONTEND_CACHED_TOKENS + "_count")
    inputs = counter_delta(before, after, FRONTEND_INPUT_TOKENS + "_sum")
    requests = counter_delta(before, after, FRONTEND_INPUT_TOKENS + "_count")
    if reported is None or requests is None:
        return result
    if reported and reported == requests and inputs:
        result["frontend_cached_tokens"] = int(cached or 0)
        result["frontend_prefix_hit_rate"] = (cached or 0) / inputs
    elif requests:
        result["frontend_prefix_null_reason"] = (
            f"the workers reported cached tokens for {int(reported)} of the {int(requests)} "
            "requests the frontend counted (dynamo_frontend_cached_tokens; Dynamo's mocker "
            "reports none): see router_kv_hit_rate"
        )
    return result
