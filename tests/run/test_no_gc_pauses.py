"""A point's measured phase runs without the cyclic collector, and the cycles it leaves
are freed as it ends (loop_health.no_gc_pauses), by a young-generation collection."""

from __future__ import annotations

import gc
import weakref

from loadgen.run.loop_health import no_gc_pauses


class Node:
    def __init__(self) -> None:
        self.other: Node | None = None


def cycle() -> weakref.ref[Node]:
    a, b = Node(), Node()
    a.other, b.other = b, a
    return weakref.ref(a)


def test_collection_is_off_during_the_point_and_its_cycles_are_freed_after() -> None:
    assert gc.isenabled()
    with no_gc_pauses():
        assert not gc.isenabled()
        left = cycle()
        assert left() is not None
    assert gc.isenabled()
    assert left() is None  # the point's own cycle, freed on the way out


def test_a_collector_left_off_by_the_caller_stays_off() -> None:
    gc.disable()
    try:
        with no_gc_pauses():
            left = cycle()
        assert not gc.isenabled()
        assert left() is not None  # the caller turned collection off: nothing is collected
    finally:
        gc.enable()
        gc.collect()
