"""Per-session / per-tree rollups, session goodput and the prefix-cache loss by context
(metrics/session_rollup.py) on hand-built records with known times; the same fields of a
real simulator replay are checked in tests/sinks/test_aiperf_artifacts.py."""

from __future__ import annotations

from typing import Any

import pytest

from loadgen.metrics.session_rollup import (
    cache_loss_by_context,
    cache_loss_over_time,
    rollup,
    session_goodput,
    session_rollups,
)
from loadgen.records import ErrorKind, RequestRecord
from tests.support.fake_records import MS, make_record, point_file


def turn(
    n: int,
    session: str,
    tree: str,
    *,
    ttft_ms: int,
    input_len: int = 1000,
    theory: int = 500,
    cached: int | None = 400,
    **more: Any,
) -> RequestRecord:
    return make_record(
        n,
        offsets_ns=(ttft_ms * MS, (ttft_ms + 10) * MS, (ttft_ms + 30) * MS),
        tokens=(1, 1, 1),
        input_len=input_len,
        session_id=session,
        tree_id=tree,
        turn_index=n,
        theoretical_cached_tokens=theory,
        cached_tokens=cached,
        **more,
    )


def test_rollup_of_one_session() -> None:
    records = [turn(0, "a", "t", ttft_ms=100), turn(1, "a", "t", ttft_ms=300)]
    figures = rollup(records)
    assert figures["turns"] == 2
    assert figures["mean_ttft_ms"] == 200
    assert figures["mean_itl_ms"] == 15  # gaps 10, 20 in each
    assert figures["e2el_total_ms"] == 130 + 330
    assert figures["cached_share"] == 0.5  # theoretical 1000 of 2000 prompt tokens


def test_goodput_counts_a_session_with_one_slow_or_failed_turn_as_bad() -> None:
    records = [
        turn(0, "a", "t", ttft_ms=100),
        turn(1, "a", "t", ttft_ms=300),
        turn(2, "b", "t", ttft_ms=100),
        turn(3, "c", "u", ttft_ms=50),
        make_record(
            4,
            offsets_ns=(),
            tokens=(),
            session_id="c",
            tree_id="u",
            error=ErrorKind.HTTP,
            status=500,
        ),
    ]
    assert session_goodput(records, {"ttft": 200.0}) == {
        "good_sessions": 1,
        "good_session_share": 1 / 3,
    }
    assert session_goodput(records, {})["good_sessions"] is None
    fields = session_rollups(records, {"ttft": 1000.0}, 0.5, 0.4)
    assert fields["good_sessions"] == 2  # c has a failed request
    assert fields["prefix_cache_loss"] == pytest.approx(0.1)
    assert fields["session_rollup"]["turns"]["mean"] == 5 / 3
    assert fields["tree_rollup"]["turns"]["mean"] == 2.5


def test_cache_loss_by_context_bin() -> None:
    records = [
        turn(0, "a", "t", ttft_ms=10, input_len=1000, theory=800, cached=600),
        turn(1, "a", "t", ttft_ms=10, input_len=3000, theory=2000, cached=2000),
        turn(2, "b", "t", ttft_ms=10, input_len=20_000, theory=10_000, cached=5_000),
        turn(3, "b", "t", ttft_ms=10, input_len=20_000, theory=10_000, cached=None),
    ]
    small, large = cache_loss_by_context(records)
    assert (small.context_min, small.requests, small.prompt_tokens) == (0, 2, 4000)
    assert small.theoretical_hit_rate == 0.7 and small.client_hit_rate == 0.65
    assert small.loss == pytest.approx(0.05)
    assert (large.context_min, large.context_max, large.requests) == (16_384, 32_768, 1)
    assert large.loss == 0.25


def test_cache_loss_over_time_windows() -> None:
    early = [
        turn(
            i,
            "a",
            "t",
            ttft_ms=10,
            input_len=1000,
            theory=500,
            cached=500,
            start_ns=(1000 + i) * MS,
        )
        for i in range(3)
    ]
    late = [
        turn(3, "b", "t", ttft_ms=10, input_len=1000, theory=500, cached=100, start_ns=11_000 * MS)
    ]
    first, last = cache_loss_over_time([*early, *late])
    assert (first.start_s, first.requests, first.loss) == (0.0, 3, 0.0)
    assert last.requests == 1 and last.loss == pytest.approx(0.4)
    assert last.end_s == pytest.approx(10.000000001)
    assert cache_loss_over_time([turn(0, "a", "t", ttft_ms=1, cached=None)]) == []


def test_report_section_shows_the_rollups_and_the_loss_by_context() -> None:
    from loadgen.sinks.report_sessions import sessions_section

    records = [
        turn(0, "a", "t", ttft_ms=100),
        turn(1, "a", "t", ttft_ms=300),
        turn(2, "b", "u", ttft_ms=100),
    ]
    from loadgen.results.point import point_from_json

    replays = "trees_started trees_completed sessions_started subagents_started max_live_trees"
    replays += " gaps_capped_tree gaps_cut_system primers primers_failed sessions_cut turns_skipped"
    figures = ("ttft_ms", "e2el_ms", "itl_ms", "interactivity_tok_s_user")
    # the session group's fields (a point file with them is a session run's)
    session = {
        **{f"replay_{name}": 0 for name in replays.split()},
        **{f"session_{name}": {} for name in (*figures, "e2e_interactivity_tok_s_user")},
        **dict.fromkeys(("theoretical_cached_tokens", "server_prefix_cache_queries"), None),
        **dict.fromkeys(("server_prefix_cache_hits", "client_cached_tokens"), None),
        "prefix_hit_rate_diff": None,
        "prompt_tokens_sent": 30,
        "client_cached_requests": 0,
        "ttft_by_context": [],
        "subagent_session_ids": 0,
        "session_history": "recorded",
        "session_ids": 2,
        "session_trees": 2,
        "theoretical_prefix_hit_rate": 0.5,
        "server_prefix_hit_rate": 0.4,
        "client_prefix_hit_rate": 0.4,
        **session_rollups(records, {"ttft": 200.0}, 0.5, 0.4),
    }
    point = point_from_json(point_file(session), "test")
    assert point.sessions is not None
    plain = point_from_json(point_file({}), "test")
    page = sessions_section([("lane-a", {4: point}), ("plain", {4: plain})])
    assert 'data-run="lane-a" data-conc="4"' in page and 'data-run="plain"' not in page
    assert '<td class=num data-field="prefix_cache_loss">10.0%</td>' in page
    assert '<td class=num data-field="good_session_share">50.0%</td>' in page  # a: 300 ms
    assert '<td class=num data-field="session_rollup.turns.p50">1.5</td>' in page
    assert "<td>0-8192</td>" in page and 'data-field="loss">10.0%' in page
    assert "No session run" in sessions_section([("plain", {4: plain})])
