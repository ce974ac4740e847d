"""The server's counters around a merged point: each server counted once.

Shards aimed at one server each read its counters before and after their measured span;
the merged point's are the earliest reading before and the latest after, per server.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from loadgen.metrics.server import ServerSnapshot, engines_behind
from loadgen.metrics.server_urls import per_url_fields
from loadgen.results.point import ServerUrlFigures
from loadgen.results.run_record import CounterFacts, PointEntry

if TYPE_CHECKING:
    from loadgen.scale.shard_dir import Shard


def merged_by_url(points: Sequence[PointEntry]) -> list[ServerUrlFigures] | None:
    """Each --server-metrics URL's figures over the whole merged point: per URL the
    earliest scrape before and the latest after, as for the summed counters. The gauges
    sampled during each shard's point are not kept in run.json: their fields are null."""
    befores = [p.server_before_by_url for p in points]
    afters = [p.server_after_by_url for p in points]
    if any(not b for b in befores) or any(not a for a in afters):
        return None
    urls = list(points[0].server_before_by_url or {})
    before: dict[str, ServerSnapshot | None] = {}
    after: dict[str, ServerSnapshot | None] = {}
    for url in urls:
        starts = [(b or {}).get(url) for b in befores]
        ends = [(a or {}).get(url) for a in afters]
        known_starts = [s for s in starts if s is not None]
        known_ends = [e for e in ends if e is not None]
        known = len(known_starts) == len(starts) and len(known_ends) == len(ends)
        before[url] = _sum_snapshots([_earliest(known_starts)]) if known else None
        after[url] = _sum_snapshots([_latest(known_ends)]) if known else None
    return per_url_fields(urls, before, after, {})


def combined_snapshots(
    shards: Sequence[Shard],
    points: Sequence[PointEntry],
) -> tuple[ServerSnapshot | None, ServerSnapshot | None]:
    """The server counters around the whole merged point: per server (base URL) the
    earliest scrape before and the latest after (counters only grow, so the smallest and
    largest), summed over servers. None when a shard has no scrape."""
    groups: dict[str, list[tuple[CounterFacts, CounterFacts]]] = {}
    for shard, point in zip(shards, points, strict=True):
        if point.server_before is None or point.server_after is None:
            return None, None
        pair = (point.server_before, point.server_after)
        groups.setdefault(shard.run.base_url or "", []).append(pair)
    befores = [_earliest([b for b, _ in g]) for g in groups.values()]
    afters = [_latest([a for _, a in g]) for g in groups.values()]
    return _sum_snapshots(befores), _sum_snapshots(afters)


def _earliest(snapshots: Sequence[CounterFacts]) -> CounterFacts:
    return min(snapshots, key=lambda s: s.counter_total)


def _latest(snapshots: Sequence[CounterFacts]) -> CounterFacts:
    return max(snapshots, key=lambda s: s.counter_total)


def _sum_snapshots(snapshots: Sequence[CounterFacts]) -> ServerSnapshot:
    samples: dict[str, float] = {}
    keyed: dict[str, dict[str, float]] = {}
    for snapshot in snapshots:
        for name, value in snapshot.samples.items():
            samples[name] = samples.get(name, 0.0) + value
        for name, values in snapshot.keyed.items():
            into = keyed.setdefault(name, {})
            for key, value in values.items():
                into[key] = into.get(key, 0.0) + value
    engines = engines_behind([s.engines for s in snapshots])
    return ServerSnapshot(samples=samples, keyed=keyed, engines=engines)
