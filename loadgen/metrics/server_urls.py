"""Per-URL server figures of a point scraped from several /metrics (`--server-metrics`).

The summed counters give the point's `server_*` fields (summary.py); this keeps what each
URL saw on its own, so one slow or badly-accepting worker behind a router or a Dynamo
frontend is visible: its acceptance (counter deltas), its server-side latency means
(queue time among them), and the KV-cache and queue gauges sampled during the point.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import msgspec

from loadgen.metrics.acceptance import server_acceptance
from loadgen.metrics.latency_bounds import ClientMaxima, bounded_means
from loadgen.metrics.server import (
    KV_USAGE,
    RUNNING,
    WAITING,
    ServerSnapshot,
    server_latency_means,
)
from loadgen.results.point import ServerUrlFigures

GAUGE_FIELDS = {
    KV_USAGE: "kv_cache_usage",
    WAITING: "requests_waiting",
    RUNNING: "requests_running",
}


def _gauge_stats(samples: Mapping[str, Sequence[float]]) -> dict[str, Any]:
    fields: dict[str, Any] = {}
    for metric, name in GAUGE_FIELDS.items():
        values = samples.get(metric) or []
        fields[f"{name}_max"] = max(values) if values else None
        fields[f"{name}_mean"] = sum(values) / len(values) if values else None
    fields["gauge_samples"] = max((len(v) for v in samples.values()), default=0)
    return fields


def per_url_fields(
    urls: Sequence[str],
    before: Mapping[str, ServerSnapshot | None],
    after: Mapping[str, ServerSnapshot | None] | None,
    gauges: Mapping[str, Mapping[str, Sequence[float]]],
    spec_tokens: int | None = None,
    maxima: ClientMaxima | None = None,
) -> list[ServerUrlFigures]:
    """One row per URL, in the order given; counter figures None where a scrape failed.
    Each URL's counters are held to the rules of the summed ones: its acceptance to
    `spec_tokens` (the run's K), its latency means to the client's `maxima` (one worker
    times its requests inside the client's spans too); None: not checked."""
    rows = []
    for url in urls:
        start, end = before.get(url), (after or {}).get(url)
        row: dict[str, Any] = {"url": url, "scraped": start is not None and end is not None}
        if start is not None and end is not None:
            row.update(server_acceptance(start, end, spec_tokens))
            means = server_latency_means(start, end)
            row.update(bounded_means(means, maxima, "server") if maxima is not None else means)
        row.update(_gauge_stats(gauges.get(url, {})))
        rows.append(msgspec.convert(row, ServerUrlFigures))
    return rows
