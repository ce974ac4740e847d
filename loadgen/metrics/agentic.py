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

import bisect
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadgen.metrics.server import ServerSnapshot, counter_delta
from loadgen.records import RequestRecord

PREFIX_QUERIES = "vllm:prefix_cache_queries_total"
PREFIX_HITS = "vllm:prefix_cache_hits_total"
STATS = (("mean", None), ("p50", 50.0), ("p75", 75.0), ("p90", 90.0), ("p95", 95.0), ("p99", 99.0))
# Lower bounds of the TTFT-by-context bins (prompt tokens); the last bin is open. The
# result files' `ttft_by_context` and the live histogram's `context_bin` label both use
# these, through context_bin().
CONTEXT_BINS = (0, 8_192, 16_384, 32_768, 65_536, 131_072)


def context_bin(input_len: int) -> int:
    """The index into CONTEXT_BINS of the bin holding a prompt of `input_len` tokens."""
    return max(0, bisect.bisect_right(CONTEXT_BINS, input_len) - 1)


def context_bin_bounds(index: int) -> tuple[int, int | None]:
    """[low, high) of a bin; high is None for the last, open one."""
    high = CONTEXT_BINS[index + 1] if index + 1 < len(CONTEXT_BINS) else None
    return CONTEXT_BINS[index], high


def context_bin_label(index: int) -> str:
    """`8192-16384`, the open last bin `131072+`: the live histogram's label value."""
    low, high = context_bin_bounds(index)
    return f"{low}+" if high is None else f"{low}-{high}"


def has_ttft(record: RequestRecord) -> bool:
    """Whether a record counts in TTFT by context: ended without error with a first chunk."""
    return record.ok and record.ttft_ns is not None


@dataclass(frozen=True, slots=True)
class CacheTokens:
    """One sent request's share of the prefix-cache figures: prefix_cache_rates sums
    these over a point, the live exporter adds them up as requests finish."""

    prompt_sent: int  # loadgen's own prompt length
    theoretical: int | None  # hits an unbounded block cache would give (trace replay)
    cached: int | None  # usage.prompt_tokens_details.cached_tokens, when reported
    cached_prompt: int  # prompt tokens of a request reporting `cached` (else 0)


def cache_tokens(record: RequestRecord) -> CacheTokens | None:
    """None for a request never sent (the server's counters never saw it)."""
    if not record.start_ns:
        return None
    cached_prompt = 0 if record.cached_tokens is None else record.prompt_tokens or record.input_len
    return CacheTokens(
        record.input_len, record.theoretical_cached_tokens, record.cached_tokens, cached_prompt
    )


def stats(values: Sequence[float]) -> dict[str, float | None]:
    """mean, p50, p75, p90, p95, p99 (None when there are no values)."""
    if not values:
        return {name: None for name, _ in STATS}
    array = np.asarray(values, dtype=np.float64)
    return {
        name: float(array.mean() if q is None else np.percentile(array, q)) for name, q in STATS
    }


def _ratio(part: float | None, whole: float | None) -> float | None:
    return None if part is None or not whole else part / whole


def prefix_cache_rates(
    records: Sequence[RequestRecord], before: ServerSnapshot | None, after: ServerSnapshot | None
) -> dict[str, Any]:
    sent = [c for c in map(cache_tokens, records) if c is not None]
    prompt_tokens = sum(c.prompt_sent for c in sent)
    theory = [c.theoretical for c in sent if c.theoretical is not None]
    theoretical = sum(theory)
    reported = [c for c in sent if c.cached is not None]
    client = sum(c.cached or 0 for c in reported)
    client_prompt = sum(c.cached_prompt for c in reported)
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
        "prefix_hit_rate_diff": (
            None if server_rate is None or client_rate is None else client_rate - server_rate
        ),
    }


def ttft_by_context(records: Sequence[RequestRecord]) -> list[dict[str, Any]]:
    """TTFT of completed requests binned by prompt length (bins with requests only)."""
    binned: list[list[float]] = [[] for _ in CONTEXT_BINS]
    for r in records:
        if has_ttft(r):
            binned[context_bin(r.input_len)].append((r.ttft_ns or 0) / 1e6)
    rows = []
    for index, ttfts in enumerate(binned):
        if ttfts:
            low, high = context_bin_bounds(index)
            figures = stats(ttfts)
            rows.append(
                {
                    "context_min": low,
                    "context_max": high,
                    "requests": len(ttfts),
                    "mean_ttft_ms": figures["mean"],
                    "p50_ttft_ms": figures["p50"],
                    "p90_ttft_ms": figures["p90"],
                    "p99_ttft_ms": figures["p99"],
                }
            )
    return rows


def latency_stats(records: Sequence[RequestRecord]) -> dict[str, Any]:
    """TTFT, E2EL, ITL (ms), interactivity 1/ITL and E2E-normalised interactivity
    (output tokens / E2EL, tok/s/user), each at mean/p50/p75/p90/p95/p99."""
    done = [r for r in records if r.ok and r.chunk_ns]
    itls = [gap / 1e6 for r in done for gap in np.diff(r.chunk_ns).tolist() if gap > 0]
    e2e = [r.output_tokens / (r.e2el_ns / 1e9) for r in done if r.e2el_ns]
    tpots = [
        ((r.e2el_ns or 0) - (r.ttft_ns or 0)) / 1e9 / (r.output_tokens - 1)
        for r in done
        if r.output_tokens > 1
    ]
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
    return {
        "session_ids": len(sessions),
        "session_trees": len(trees),
        "subagent_session_ids": sum(1 for s in sessions if "::" in s),
    }
