"""Each shard's view of the server, kept in a merge's run.json, and the one warning when
their round trips differ enough to skew a TTFT comparison.

Every TTFT a shard measures includes its round trip to the server, so a merged point
mixes shards that saw the server nearer or farther. The rule (docs/workers-and-shards.md):
warn when the spread of the shards' preflight round trips (largest minus smallest) is
more than the larger of RTT_SKEW_FLOOR_MS and RTT_SKEW_SHARE of the smallest median TTFT
among the merged points; below 1 ms the round trips agree within what one machine's
scheduling moves them.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadgen.results.run_record import ShardView
from loadgen.scale.shard_dir import Shard

RTT_SKEW_FLOOR_MS = 1.0
RTT_SKEW_SHARE = 0.10


def shard_views(shards: Sequence[Shard]) -> tuple[ShardView, ...]:
    """Each shard's round trip (its preflight's) and clock state (its first point's)."""
    views = []
    for shard in shards:
        clock = next((p.clock for p in shard.run.points if p.clock is not None), None)
        views.append(
            ShardView(
                index=shard.index,
                rtt_ms=shard.run.server.rtt_ms if shard.run.server else None,
                boot_id=clock.boot_id if clock else None,
                synced=clock.synced if clock else None,
                esterror_us=clock.esterror_us if clock else None,
                offset_change_ns=clock.offset_change_ns if clock else None,
            )
        )
    return tuple(views)


def rtt_skew_line(views: Sequence[ShardView], median_ttfts_ms: Sequence[float]) -> str | None:
    """The warning when the shards' round trips differ by more than the rule allows (None:
    they do not, or fewer than two shards measured one)."""
    known = [(v.index, v.rtt_ms) for v in views if v.rtt_ms is not None]
    if len(known) < 2:
        return None
    near = min(known, key=lambda k: k[1])
    far = max(known, key=lambda k: k[1])
    spread = far[1] - near[1]
    ttft = min(median_ttfts_ms, default=None)
    allowed = max(RTT_SKEW_FLOOR_MS, RTT_SKEW_SHARE * ttft if ttft is not None else 0.0)
    if spread <= allowed:
        return None
    return (
        f"the shards' round trips to the server differ by {spread:.2f} ms (shard {near[0]} "
        f"{near[1]:.2f} ms, shard {far[0]} {far[1]:.2f} ms), more than {allowed:.2f} ms "
        f"(the larger of {RTT_SKEW_FLOOR_MS:g} ms and {RTT_SKEW_SHARE:.0%} of the smallest "
        "median TTFT): each shard's TTFT includes its own round trip, so the merged TTFT "
        "mixes them (run.json `shards`)"
    )
