"""A one-line progress display on stderr, off the timing path.

The observer hooks only bump counters (a few attribute writes per request, never per
chunk); a loop timer redraws the line at most `REFRESH_S` apart, and only when something
changed, so at 512 streams the display costs microseconds per second of measurement.
"""

from __future__ import annotations

import asyncio
import sys
from time import perf_counter
from typing import TextIO

from loadgen.records import ErrorKind, RequestRecord
from loadgen.results.point import PointResult

REFRESH_S = 0.25


class ProgressLine:
    """RunObserver that draws `conc 64 [2/6]  412/640 req  37.1 req/s  errors 0`."""

    def __init__(self, points: int, stream: TextIO | None = None) -> None:
        self.stream = stream or sys.stderr
        self.interactive = self.stream.isatty()
        self.points = points
        self.point_index = 0
        self.conc = 0
        self.total = 0
        self.done = 0
        self.errors = 0
        self.cancelled = 0
        self.in_flight = 0
        self._started = perf_counter()
        self._drawn: str | None = None
        self._timer: asyncio.TimerHandle | None = None

    # ---- RunObserver ------------------------------------------------------------------------
    def point_started(self, conc: int, num_requests: int) -> None:
        self.point_index += 1
        self.conc, self.total, self.done, self.errors, self.in_flight = conc, num_requests, 0, 0, 0
        self.cancelled = 0
        self._started = perf_counter()
        self._schedule()

    def request_started(self, conc: int) -> None:
        self.in_flight += 1

    def request_finished(self, record: RequestRecord) -> None:
        self.in_flight -= 1
        self.done += 1
        if record.error is ErrorKind.CANCELLED:
            self.cancelled += 1  # the run stopped it: not the server's error
        elif record.error is not None:
            self.errors += 1

    def point_finished(self, conc: int, result: PointResult) -> None:
        self._cancel()
        self.draw(final=True)

    def loop_lag(self, seconds: float) -> None:
        pass  # the progress line shows requests, not client health

    def session_started(self, conc: int, root: bool) -> None:
        pass  # the line counts turns (requests); sessions are on /metrics

    def session_finished(self, conc: int, root: bool) -> None:
        pass

    # ---- drawing ----------------------------------------------------------------------------
    def line(self) -> str:
        elapsed = max(perf_counter() - self._started, 1e-9)
        return (
            f"conc {self.conc} [{self.point_index}/{self.points}]  "
            f"{self.done}/{self.total} req  {self.done / elapsed:.1f} req/s  "
            f"in flight {self.in_flight}  errors {self.errors}"
            + (f"  cancelled {self.cancelled}" if self.cancelled else "")
        )

    def draw(self, *, final: bool = False) -> None:
        text = self.line()
        if text == self._drawn and not final:
            return
        self._drawn = text
        if self.interactive:
            self.stream.write("\r\x1b[2K" + text + ("\n" if final else ""))
        elif final:
            self.stream.write(text + "\n")
        self.stream.flush()

    def _schedule(self) -> None:
        self._cancel()
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return
        self._timer = loop.call_later(REFRESH_S, self._tick)

    def _tick(self) -> None:
        if self.interactive:
            self.draw()
        self._schedule()

    def _cancel(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    def close(self) -> None:
        self._cancel()
