"""Per-session and per-tree rollups, session goodput, and the prefix-cache loss by context
(pure: a point's records in, numbers out). What AIPerf cannot report ("no built-in
per-session roll-up"), from the same per-request figures as the point's own statistics.

- A session's (or tree's) rollup, over its requests: `turns` (requests sent),
  `mean_ttft_ms` and `mean_itl_ms` (TTFT, and every chunk gap pooled, of its completed
  requests), `e2el_total_ms` (the E2ELs summed: the time the agent waited on the server),
  `cached_share` (theoretical cached tokens / prompt tokens of its requests, trace replay;
  else the reported cached_tokens share, else None). The point reports the distribution
  of each over its sessions and over its trees (metrics/agentic.stats).
- Session goodput (with --slo): a session is good when none of its requests failed and
  every completed one meets every SLO, by the point's own per-request rule
  (metrics/summary.good_mask).
- Prefix-cache loss: theoretical minus server hit rate over the point (the server's
  counters), and by context bin theoretical minus client-reported hit rate over the
  requests that report cached_tokens (vLLM reports the same number it counts: docs/
  sessions.md), so the bins show where the cache lost what the trace allowed; and the
  same over time, in LOSS_WINDOWS equal spans of the point by request start.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypedDict

import numpy as np

from loadgen.metrics.agentic import CONTEXT_BINS, context_bin, context_bin_bounds, stats
from loadgen.metrics.arrays import PointArrays, is_completed
from loadgen.metrics.summary import good_mask, latency_samples
from loadgen.records import RequestRecord
from loadgen.results.point import CacheLossByContext, CacheLossOverTime

LOSS_WINDOWS = 10  # spans of the point for the loss over time
ROLLUP_FIGURES = ("turns", "mean_ttft_ms", "mean_itl_ms", "e2el_total_ms", "cached_share")


def _mean(values: Sequence[float]) -> float | None:
    return float(np.mean(values)) if values else None


def _cached_share(records: Sequence[RequestRecord]) -> float | None:
    prompt = sum(r.input_len for r in records)
    theory = [
        r.theoretical_cached_tokens for r in records if r.theoretical_cached_tokens is not None
    ]
    if theory and prompt:
        return sum(theory) / prompt
    reported = [r for r in records if r.cached_tokens is not None]
    reported_prompt = sum(r.prompt_tokens or r.input_len for r in reported)
    return (
        sum(r.cached_tokens or 0 for r in reported) / reported_prompt if reported_prompt else None
    )


def rollup(records: Sequence[RequestRecord]) -> dict[str, float | None]:
    """One session's or tree's figures (module doc)."""
    done = [r for r in records if is_completed(r)]
    gaps = [(b - a) / 1e6 for r in done for a, b in zip(r.chunk_ns, r.chunk_ns[1:], strict=False)]
    return {
        "turns": float(len(records)),
        "mean_ttft_ms": _mean([(r.chunk_ns[0] - r.start_ns) / 1e6 for r in done]),
        "mean_itl_ms": _mean(gaps),
        "e2el_total_ms": sum((r.chunk_ns[-1] - r.start_ns) / 1e6 for r in done),
        "cached_share": _cached_share(records),
    }


def _grouped(
    records: Sequence[RequestRecord], key: Callable[[RequestRecord], str | None]
) -> dict[str, list[RequestRecord]]:
    groups: dict[str, list[RequestRecord]] = defaultdict(list)
    for record in records:
        name = key(record)
        if name is not None and record.start_ns:
            groups[name].append(record)
    return groups


def rollup_stats(groups: Mapping[str, Sequence[RequestRecord]]) -> dict[str, Any]:
    """The distribution over groups of each rollup figure (None figures left out)."""
    rows = [rollup(members) for members in groups.values()]
    return {
        name: stats([v for row in rows if (v := row[name]) is not None]) for name in ROLLUP_FIGURES
    }


def session_goodput(records: Sequence[RequestRecord], slos: Mapping[str, float]) -> dict[str, Any]:
    sessions = _grouped(records, lambda r: r.session_id)
    if not slos:
        return {"good_sessions": None, "good_session_share": None}
    done = [r for r in records if is_completed(r)]
    good_ids: set[int] = set()
    if done:
        arrays = PointArrays.build(done)
        mask = good_mask(arrays, latency_samples(arrays), slos)
        good_ids = {id(r) for r, ok in zip(done, mask.tolist(), strict=True) if ok}
    good = sum(all(id(r) in good_ids for r in members) for members in sessions.values())
    return {"good_sessions": good, "good_session_share": good / len(sessions) if sessions else None}


def cache_loss_by_context(records: Sequence[RequestRecord]) -> list[CacheLossByContext]:
    """Per context bin with reporting requests: theoretical and client hit rates, loss."""
    binned: list[list[RequestRecord]] = [[] for _ in CONTEXT_BINS]
    for r in _reporting(records):
        binned[context_bin(r.input_len)].append(r)
    rows = []
    for index, members in enumerate(binned):
        if members:
            low, high = context_bin_bounds(index)
            rows.append(CacheLossByContext(context_min=low, context_max=high, **_loss(members)))
    return rows


class _Loss(TypedDict):
    """The loss figures of a group of reporting requests (a context bin, a span): the
    fields the two row types share, in their order."""

    requests: int
    prompt_tokens: int
    theoretical_hit_rate: float  # theoretical cached tokens / prompt tokens
    client_hit_rate: float  # reported cached tokens / the prompt tokens the server counted
    loss: float


def _loss(members: Sequence[RequestRecord]) -> _Loss:
    prompt = sum(r.input_len for r in members)
    theory = sum(r.theoretical_cached_tokens or 0 for r in members) / prompt
    client = sum(r.cached_tokens or 0 for r in members) / sum(
        r.prompt_tokens or r.input_len for r in members
    )
    return _Loss(
        requests=len(members),
        prompt_tokens=prompt,
        theoretical_hit_rate=theory,
        client_hit_rate=client,
        loss=theory - client,
    )


def _reporting(records: Sequence[RequestRecord]) -> list[RequestRecord]:
    """Sent requests with both a theoretical and a reported cached count."""
    return [
        r
        for r in records
        if r.start_ns
        and r.input_len
        and r.cached_tokens is not None
        and r.theoretical_cached_tokens is not None
    ]


def cache_loss_over_time(
    records: Sequence[RequestRecord], windows: int = LOSS_WINDOWS
) -> list[CacheLossOverTime]:
    """The loss in `windows` equal spans of the point (by request start, from the first),
    spans without reporting requests left out; `start_s`/`end_s` from the first start."""
    members = _reporting(records)
    if not members:
        return []
    origin = min(r.start_ns for r in members)
    span = max(r.start_ns for r in members) - origin + 1
    binned: list[list[RequestRecord]] = [[] for _ in range(windows)]
    for r in members:
        binned[(r.start_ns - origin) * windows // span].append(r)
    rows = []
    for i, part in enumerate(binned):
        if part:
            rows.append(
                CacheLossOverTime(
                    start_s=i * span / windows / 1e9,
                    end_s=(i + 1) * span / windows / 1e9,
                    **_loss(part),
                )
            )
    return rows


def session_rollups(
    records: Sequence[RequestRecord],
    slos: Mapping[str, float],
    theoretical_rate: float | None,
    server_rate: float | None,
) -> dict[str, Any]:
    """The SessionMetrics fields of this module (docs/results.md)."""
    return {
        "session_rollup": rollup_stats(_grouped(records, lambda r: r.session_id)),
        "tree_rollup": rollup_stats(_grouped(records, lambda r: r.tree_id)),
        **session_goodput(records, slos),
        "prefix_cache_loss": (
            None
            if theoretical_rate is None or server_rate is None
            else theoretical_rate - server_rate
        ),
        "prefix_cache_loss_by_context": cache_loss_by_context(records),
        "prefix_cache_loss_over_time": cache_loss_over_time(records),
    }
