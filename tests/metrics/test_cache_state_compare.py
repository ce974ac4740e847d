"""compare's cache_state warning (metrics/trust.py): said when the compared points'
prefix caches were in different states, never when they were alike; a file from
before the field counts as uncontrolled, which it was."""

from __future__ import annotations

from loadgen.metrics.trust import cache_warnings
from loadgen.results.point import CacheState


def test_alike_states_say_nothing() -> None:
    reset = {"cache_state": "reset"}
    assert cache_warnings({"a": {4: reset, 8: reset}, "b": {4: reset}}) == []
    assert cache_warnings({"old": {4: {}}, "new": {4: {"cache_state": "uncontrolled"}}}) == []


def test_differing_states_are_said_of_every_point() -> None:
    warned = cache_warnings(
        {
            "cold": {4: {"cache_state": "reset"}},
            "warm": {4: {}},
            "flaky": {4: {"cache_state": "reset_failed"}},
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
