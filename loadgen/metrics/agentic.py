"""Session-run figures: prefix-cache hit rates from three sources, interactivity, TTFT by
context length (pure: records and scrapes in, numbers out).

Prefix-cache hit rate, side by side like acceptance:
- theoretical: tokens an unbounded block cache would hit according to the trace's
  hash_ids (RequestRecord.theoretical_cached_tokens), over prompt tokens sent;
- server: vllm:prefix_cache_hits / vllm:prefix_cache_queries deltas over the point;
- client-observed: usage.prompt_tokens_details.cached_tokens summed over the requests that
  report it, over their prompt tokens.
The request population is every measured request that was sent (failed ones included:
the server's counters count them too); primers and warmup are outside the point.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from typing import Any

import numpy as np

from loadgen.metrics.server import ServerSnapshot, counter_delta
from loadgen.records import RequestRecord

PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
STATS = (("mean", None), ("p50", 50.0), ("p75", 75.0), ("p90", 90.0), ("p95", 95.0),
         ("p99", 99.0))
CONTEXT_BINS = (0, 8_192, 16_384, 32_768, 65_536, 131_072)


def stats(values: Sequence[float]) -> dict[str, float | None]:
    """mean, p50, p75, p90, p95, p99 (None when there are no values)."""
    if not values:
        return {name: None for name, _ in STATS}
    array = np.asarray(values, dtype=np.float64)
    return {name: float(array.mean() if q is None else np.percentile(array, q))
            for name, q in STATS}


def _ratio(part: float | None, whole: float | None) -> float | None:
    return None if part is None or not whole else part / whole


def prefix_cache_rates(records: Sequence[RequestRecord], before: ServerSnapshot | None,
                       after: ServerSnapshot | None) -> dict[str, Any]:
    sent = [r for r in records if r.start_ns]
    prompt_tokens = sum(r.input_len for r in sent)
    theory = [r for r in sent if r.theoretical_cached_tokens is not None]
    theoretical = sum(r.theoretical_cached_tokens or 0 for r in theory)
    reported = [r for r in sent if r.cached_tokens is not None]
    client = sum(r.cached_tokens or 0 for r in reported)
    client_prompt = sum(r.prompt_tokens or r.input_len for r in reported)
    queries = hits = None
    if before is not None and after is not None:
        queries = counter_delta(before, after, PREFIX_QUERIES)
        hits = counter_delta(before, after, PREFIX_HITS)
    server_rate = _ratio(hits, queries)
    client_rate = _ratio(client, client_prompt) if reported else None
    return {
        "prompt_tokens_sent": prompt_tokens,
        "theoretical_cached_tokens": theoretical if theory else None,
        "theoretical_prefix_hit_rate": _ratio(theoretical, prompt_tokens) if theory else None,
        "server_prefix_cache_queries": None if queries is None else int(queries),
        "server_prefix_cache_hits": None if hits is None else int(hits),
        "server_prefix_hit_rate": server_rate,
        "client_cached_tokens": client if reported else None,
        "client_cached_requests": len(reported),
        "client_prefix_hit_rate": client_rate,
        "prefix_hit_rate_diff": (None if server_rate is None or client_rate is None
                                 else client_rate - server_rate),
    }


def ttft_by_context(records: Sequence[RequestRecord]) -> list[dict[str, Any]]:
    """TTFT of completed requests binned by prompt length (bins with requests only)."""
    bounds: list[int | None] = [*CONTEXT_BINS, None]
    rows = []
    for low, high in itertools.pairwise(bounds):
        assert low is not None
        ttfts = [r.ttft_ns / 1e6 for r in records if r.ok and r.ttft_ns is not None
                 and r.input_len >= low and (high is None or r.input_len < high)]
        if ttfts:
            figures = stats(ttfts)
            rows.append({"context_min": low, "context_max": high, "requests": len(ttfts),
                         "mean_ttft_ms": figures["mean"], "p50_ttft_ms": figures["p50"],
                         "p90_ttft_ms": figures["p90"], "p99_ttft_ms": figures["p99"]})
    return rows


def latency_stats(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """TTFT, E2EL, ITL (ms), interactivity 1/ITL and E2E-normalised interactivity
    (output tokens / E2EL, tok/s/user), each at mean/p50/p75/p90/p95/p99."""
    done = [r for r in records if r.ok and r.chunk_ns]
    itls = [gap / 1e6 for r in done for gap in np.diff(r.chunk_ns).tolist() if gap > 0]
    e2e = [r.output_tokens / (r.e2el_ns / 1e9) for r in done if r.e2el_ns]
    tpots = [((r.e2el_ns or 0) - (r.ttft_ns or 0)) / 1e9 / (r.output_tokens - 1)
             for r in done if r.output_tokens > 1]
    return {
        "session_ttft_ms": stats([(r.ttft_ns or 0) / 1e6 for r in done]),
        "session_e2el_ms": stats([(r.e2el_ns or 0) / 1e6 for r in done]),
        "session_itl_ms": stats(itls),
        "session_interactivity_tok_s_user": stats([1.0 / t for t in tpots if t > 0]),
        "session_e2e_interactivity_tok_s_user": stats(e2e),
    }


def session_counts(records: Sequence[RequestRecord]) -> dict[str, Any]:
    sessions = {r.session_id for r in records if r.session_id is not None}
    trees = {r.tree_id for r in records if r.tree_id is not None}
    return {"session_ids": len(sessions), "session_trees": len(trees),
            "subagent_session_ids": sum(1 for s in sessions if "::" in s)}
