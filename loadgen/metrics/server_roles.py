"""Per-role server figures of a point (`--server-metrics ROLE=URL`): a disaggregated
deployment's frontend, prefill and decode workers each seen as one server.

A role's counters are its URLs' summed (merge_snapshots: null when any of them failed a
scrape, as for the whole), so its acceptance and latency means are the role's own; its
gauges come from the per-URL rows (server_urls.py): requests running and waiting added
up over its URLs, KV-cache usage the mean of its URLs' means and the fullest URL's max.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from loadgen.metrics.acceptance import server_acceptance
from loadgen.metrics.latency_bounds import ClientMaxima, bounded_means
from loadgen.metrics.server import ServerSnapshot, merge_snapshots, server_latency_means
from loadgen.results.point import ServerUrlFigures


def per_role_fields(
    roles: Mapping[str, str],
    before: Mapping[str, ServerSnapshot | None],
    after: Mapping[str, ServerSnapshot | None] | None,
    url_rows: Sequence[ServerUrlFigures],
    spec_tokens: int | None = None,
    maxima: ClientMaxima | None = None,
) -> list[dict[str, Any]]:
    """One dict per role, in the order roles are first named (`roles`: URL -> role); its
    counters held to the rules of the summed ones (server_urls.per_url_fields)."""
    rows_by_url = {row.url: row for row in url_rows}
    out = []
    for role in dict.fromkeys(roles.values()):
        urls = [url for url, r in roles.items() if r == role]
        start = merge_snapshots([before.get(url) for url in urls])
        end = merge_snapshots([(after or {}).get(url) for url in urls])
        row: dict[str, Any] = {"role": role, "urls": urls}
        row["scraped"] = start is not None and end is not None
        if start is not None and end is not None:
            row.update(server_acceptance(start, end, spec_tokens))
            means = server_latency_means(start, end)
            row.update(bounded_means(means, maxima, "server") if maxima is not None else means)
        gauges = [rows_by_url[url] for url in urls if url in rows_by_url]
        row["requests_running_mean"] = _sum([g.requests_running_mean for g in gauges])
        row["requests_waiting_mean"] = _sum([g.requests_waiting_mean for g in gauges])
        kv = [g.kv_cache_usage_mean for g in gauges if g.kv_cache_usage_mean is not None]
        row["kv_cache_usage_mean"] = sum(kv) / len(kv) if kv else None
        peaks = [g.kv_cache_usage_max for g in gauges if g.kv_cache_usage_max is not None]
        row["kv_cache_usage_max"] = max(peaks) if peaks else None
        out.append(row)
    return out


def _sum(values: Sequence[float | None]) -> float | None:
    """The sum, or None when any URL had no sample (a partial sum would be wrong)."""
    known = [v for v in values if v is not None]
    if not values or len(known) < len(values):
        return None
    return float(sum(known))
