"""An asyncio event loop on a virtual clock: when every task waits on a timer, the clock
jumps to the earliest one instead of the loop sleeping. `asyncio.sleep(0.01)` then takes
exactly 10 ms of the loop's time and no wall time, so a test of what the scheduler does
at which moment asserts exact instants, whatever else the machine is doing.

Only for code that waits on timers and on other tasks, never on sockets (a socket's
answer takes wall time the virtual clock does not see)."""

from __future__ import annotations

import asyncio
import selectors
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")
START_NS = 1_000_000_000_000  # an arbitrary non-zero start: 0 would read as "no time"


class _JumpingSelector(selectors.DefaultSelector):
    """Polls without waiting; a wait for a timer moves the loop's clock to it instead."""

    def __init__(self, clock: VirtualTimeLoop) -> None:
        super().__init__()
        self._clock = clock

    def select(self, timeout: float | None = None) -> list[tuple[selectors.SelectorKey, int]]:
        events = super().select(0)
        if not events and timeout is not None and timeout > 0:
            self._clock.now_ns += round(timeout * 1e9)
        return events


class VirtualTimeLoop(asyncio.SelectorEventLoop):
    def __init__(self) -> None:
        self.now_ns = START_NS
        super().__init__(_JumpingSelector(self))

    def time(self) -> float:
        return self.now_ns / 1e9

    def clock(self) -> int:
        """The loop's time in ns: what the code under test gets as its clock."""
        return self.now_ns


def run(main: Coroutine[Any, Any, T]) -> tuple[T, VirtualTimeLoop]:
    """Run `main` to completion on a fresh virtual-time loop; its result and the loop (for
    the clock it ended at)."""
    loop = VirtualTimeLoop()
    try:
        return loop.run_until_complete(main), loop
    finally:
        loop.run_until_complete(loop.shutdown_asyncgens())
        loop.close()


def clock() -> int:
    """The running loop's virtual time in ns (inside a coroutine run by `run`)."""
    loop = asyncio.get_running_loop()
    assert isinstance(loop, VirtualTimeLoop), "not on a virtual-time loop"
    return loop.now_ns
