"""The server's counters around a merged point: each server counted once.

Shards aimed at one server each read its counters before and after their measured span;
the merged point's are the earliest reading before and the latest after, per server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from loadgen.metrics.server import ServerSnapshot
from loadgen.metrics.server_urls import per_url_fields

if TYPE_CHECKING:
    from loadgen.merge.shard import Shard


def merged_by_url(points: Sequence[dict[str, Any]]) -> list[dict[str, Any]] | None:
    """Each --server-metrics URL's figures over the whole merged point: per URL the
    earliest scrape before and the latest after, as for the summed counters. The gauges
    sampled during each shard's point are not kept in run.json: their fields are null."""
    if any(not p.get("server_before_by_url") or not p.get("server_after_by_url") for p in points):
        return None
    urls = list(points[0]["server_before_by_url"])
    before: dict[str, ServerSnapshot | None] = {}
    after: dict[str, ServerSnapshot | None] = {}
    for url in urls:
        starts = [p["server_before_by_url"].get(url) for p in points]
        ends = [p["server_after_by_url"].get(url) for p in points]
        known = None not in starts and None not in ends
        before[url] = _sum_snapshots([min(starts, key=_counter_total)]) if known else None
        after[url] = _sum_snapshots([max(ends, key=_counter_total)]) if known else None
    return per_url_fields(urls, before, after, {})


def combined_snapshots(
    shards: Sequence[Shard],
    points: Sequence[dict[str, Any]],
) -> tuple[ServerSnapshot | None, ServerSnapshot | None]:
    """The server counters around the whole merged point: per server (base URL) the
    earliest scrape before and the latest after (counters only grow, so the smallest and
    largest), summed over servers. None when a shard has no scrape."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for shard, point in zip(shards, points, strict=True):
        if point.get("server_before") is None or point.get("server_after") is None:
            return None, None
        groups.setdefault(shard.run.get("base_url") or "", []).append(point)
    befores = [min((p["server_before"] for p in g), key=_counter_total) for g in groups.values()]
    afters = [max((p["server_after"] for p in g), key=_counter_total) for g in groups.values()]
    return _sum_snapshots(befores), _sum_snapshots(afters)


def _counter_total(snapshot: dict[str, Any]) -> float:
    return float(sum(v for k, v in snapshot["samples"].items() if k.endswith(("_total", "_count"))))


def _sum_snapshots(snapshots: Sequence[dict[str, Any]]) -> ServerSnapshot:
    samples: dict[str, float] = {}
    keyed: dict[str, dict[str, float]] = {}
    for snapshot in snapshots:
        for name, value in snapshot["samples"].items():
            samples[name] = samples.get(name, 0.0) + value
        for name, values in snapshot["keyed"].items():
            into = keyed.setdefault(name, {})
            for key, value in values.items():
                into[key] = into.get(key, 0.0) + value
    return ServerSnapshot(samples=samples, keyed=keyed)
