"""Who wins at a concurrency (metrics/compare_disagg.py): the lead must be at least
TIE_SHARE of the runner-up's figure; one lane alone, or an incomplete point, wins
nothing; lanes without role figures or parts are left out."""

from __future__ import annotations

from typing import Any

from loadgen.metrics.compare import THROUGHPUT
from loadgen.metrics.compare_disagg import TIE_SHARE, disagg_comparison, winner
from loadgen.results.point import PointResult, point_from_json
from tests.support.fake_records import point_file


def typed(fields: dict[str, Any]) -> PointResult:
    return point_from_json(point_file(fields), "test")


def lane(throughput: float, ttft: float, *, complete: bool = True) -> PointResult:
    role = {"role": "decode", "urls": ["u"], "scraped": True, "server_mean_ttft_ms": 5.0}
    return typed(
        {
            "output_throughput": throughput,
            "mean_ttft_ms": ttft,
            "complete": complete,
            "server_metrics_by_role": [role],
        }
    )


def test_a_lead_under_the_tie_share_names_no_winner() -> None:
    close = winner(
        4,
        "throughput",
        [("a", 100.0), ("b", 100.0 * (1 + TIE_SHARE / 2))],
        higher=True,
        unit="tok/s",
    )
    clear = winner(
        4,
        "throughput",
        [("a", 100.0), ("b", 100.0 * (1 + 2 * TIE_SHARE))],
        higher=True,
        unit="tok/s",
    )
    assert close.run is None and "no winner" in close.sentence
    assert clear.run == "b" and clear.sentence.startswith("conc 4: throughput: b wins")
    lower = winner(4, "mean TTFT", [("a", 50.0), ("b", 80.0)], higher=False, unit="ms")
    assert lower.run == "a" and "(38% less)" in lower.sentence


def test_incomplete_points_and_plain_lanes_are_left_out() -> None:
    plain = typed({"output_throughput": 999.0, "mean_ttft_ms": 1.0})  # no roles, no parts
    found = disagg_comparison(
        {
            "1p1d": {1: lane(100, 50), 4: lane(300, 80)},
            "2p1d": {1: lane(120, 40), 4: lane(900, 10, complete=False)},
            "plain": {1: plain, 4: plain},
        },
        "output_throughput",
        THROUGHPUT["output_throughput"],
    )
    assert found is not None and found.runs == ("1p1d", "2p1d")
    at_1 = {w.quantity: w.run for w in found.winners_at(1)}
    assert at_1 == {"throughput": "2p1d", "mean TTFT": "2p1d"}
    at_4 = found.winners_at(4)
    assert [w.run for w in at_4] == [None, None]  # 2p1d's point is incomplete
    assert all("only 1p1d measured" in w.sentence for w in at_4)
    assert (
        disagg_comparison(
            {"plain": {1: plain}}, "output_throughput", THROUGHPUT["output_throughput"]
        )
        is None
    )
