"""The merge's round-trip warning rule (scale/shard_views.py) over typed shard views:
spread of the shards' round trips against the larger of 1 ms and 10% of the smallest
median TTFT."""

from __future__ import annotations

from loadgen.results.run_record import ShardView
from loadgen.scale.shard_views import rtt_skew_line


def views(*rtts: float | None) -> list[ShardView]:
    return [ShardView(index=i, rtt_ms=rtt) for i, rtt in enumerate(rtts)]


def test_a_spread_within_the_floor_is_not_warned() -> None:
    # 0.9 ms apart, TTFTs of 2 ms: 10% is 0.2 ms, the 1 ms floor allows it
    assert rtt_skew_line(views(0.3, 1.2), [2.0, 5.0]) is None


def test_a_spread_beyond_the_floor_with_short_ttfts_is_warned() -> None:
    line = rtt_skew_line(views(0.5, 0.7, 2.0), [4.0, 8.0])
    assert line is not None
    assert "differ by 1.50 ms" in line
    assert "shard 0 0.50 ms, shard 2 2.00 ms" in line
    assert "more than 1.00 ms" in line


def test_the_smallest_median_ttft_sets_the_allowance() -> None:
    # 5 ms apart: within 10% of a 60 ms TTFT, beyond 10% of a 40 ms one
    assert rtt_skew_line(views(1.0, 6.0), [60.0, 90.0]) is None
    line = rtt_skew_line(views(1.0, 6.0), [90.0, 40.0])
    assert line is not None and "more than 4.00 ms" in line


def test_unknown_round_trips_are_not_compared() -> None:
    assert rtt_skew_line(views(None, 9.0), [1.0]) is None
    assert rtt_skew_line(views(None, 0.5, 9.0), [1.0]) is not None


def test_no_merged_point_leaves_the_floor() -> None:
    assert rtt_skew_line(views(1.0, 1.9), []) is None
    assert rtt_skew_line(views(1.0, 2.1), []) is not None
