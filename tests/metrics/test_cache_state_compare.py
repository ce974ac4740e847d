"""compare's cache_state warning (metrics/trust.py): said when the compared points'
prefix caches were in different states, never when they were alike; a file from
before the field counts as uncontrolled, which it was."""

from __future__ import annotations

from loadgen.metrics.trust import cache_warnings
from loadgen.results.point import CacheState, PointResult, point_from_json
from tests.support.fake_records import point_file


def typed(state: str | None) -> PointResult:
    """A point file with this cache_state (None: one from before the field), read back."""
    fields = point_file({"cache_state": state})
    if state is None:
        del fields["cache_state"]
    return point_from_json(fields, "test")


def test_alike_states_say_nothing() -> None:
    reset = typed("reset")
    assert cache_warnings({"a": {4: reset, 8: reset}, "b": {4: reset}}) == []
    assert cache_warnings({"old": {4: typed(None)}, "new": {4: typed("uncontrolled")}}) == []


def test_differing_states_are_said_of_every_point() -> None:
    warned = cache_warnings(
        {
            "cold": {4: typed("reset")},
            "warm": {4: typed(None)},
            "flaky": {4: typed("reset_failed")},
        }
    )
    assert [(name, conc) for name, conc, _ in warned] == [("cold", 4), ("warm", 4), ("flaky", 4)]
    assert warned[0][2].startswith("cache_state reset, while reset_failed, uncontrolled elsewhere")
    assert warned[1][2].startswith("cache_state uncontrolled, while reset, reset_failed elsewhere")


def test_pooled_states_reset_only_when_each_was() -> None:
    reset, failed = (
        CacheState(cache_state="reset"),
        CacheState(cache_state="reset_failed", cache_reset_detail="x: still refused"),
    )
    assert CacheState.combined([reset, reset]) == reset
    assert CacheState.combined([reset, failed, failed]) == failed
    assert CacheState.combined([reset, CacheState()]) == CacheState()
    assert CacheState.combined([]) == CacheState()
