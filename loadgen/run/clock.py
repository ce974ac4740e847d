"""Clock readings that let results from several machines share one timeline.

Every duration is a perf_counter_ns (CLOCK_MONOTONIC) difference within one process, so
TTFT or ITL never depend on this. Only point-level figures that span processes (duration,
throughput, the steady window) need their start and end times on one clock. Processes
on one machine share CLOCK_MONOTONIC (one boot: same `boot_id`), so their readings line up
exactly. Across machines each process reads its monotonic and wall clocks together at the
start of a point; `unix - mono` then maps its readings onto the wall clock, and the
alignment is as good as the machines' wall clocks agree, which loadgen cannot measure:
it records what the kernel's NTP discipline estimates (adjtimex `esterror`, and whether
the clock is synchronized at all) and reports that as the uncertainty.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadgen.results.run_record import ClockFacts

PAIR_TRIES = 5
STA_UNSYNC = 0x0040  # <sys/timex.h>: the clock is not synchronized
TIME_ERROR = 5  # adjtimex's return value for an unsynchronized clock


@dataclass(frozen=True, slots=True)
class ClockPair:
    """A monotonic and a wall-clock reading taken together (`read_ns` apart at most)."""

    mono_ns: int
    unix_ns: int
    read_ns: int  # the monotonic reads bracketing the wall read were this far apart

    @property
    def offset_ns(self) -> int:
        """Add to a monotonic reading of this process to get wall-clock ns."""
        return self.unix_ns - self.mono_ns


def read_pair(tries: int = PAIR_TRIES) -> ClockPair:
    """The tightest of a few (mono, wall, mono) brackets: the wall reading is paired with
    the bracket's midpoint, off by at most half its width."""
    best: ClockPair | None = None
    for _ in range(tries):
        before = time.perf_counter_ns()
        wall = time.time_ns()
        after = time.perf_counter_ns()
        pair = ClockPair((before + after) // 2, wall, after - before)
        if best is None or pair.read_ns < best.read_ns:
            best = pair
    assert best is not None
    return best


class _Timeval(ctypes.Structure):
    _fields_ = [("tv_sec", ctypes.c_long), ("tv_usec", ctypes.c_long)]


class _Timex(ctypes.Structure):
    """struct timex of <sys/timex.h> (Linux, glibc and musl alike)."""

    _fields_ = [
        ("modes", ctypes.c_uint),
        ("offset", ctypes.c_long),
        ("freq", ctypes.c_long),
        ("maxerror", ctypes.c_long),
        ("esterror", ctypes.c_long),
        ("status", ctypes.c_int),
        ("constant", ctypes.c_long),
        ("precision", ctypes.c_long),
        ("tolerance", ctypes.c_long),
        ("time", _Timeval),
        ("tick", ctypes.c_long),
        ("ppsfreq", ctypes.c_long),
        ("jitter", ctypes.c_long),
        ("shift", ctypes.c_int),
        ("stabil", ctypes.c_long),
        ("jitcnt", ctypes.c_long),
        ("calcnt", ctypes.c_long),
        ("errcnt", ctypes.c_long),
        ("stbcnt", ctypes.c_long),
        ("tai", ctypes.c_int),
        ("_reserved", ctypes.c_int * 11),
    ]


def kernel_clock_error() -> dict[str, Any]:
    """What the kernel's NTP discipline says about the wall clock (read-only adjtimex):
    `synced` false when no NTP daemon disciplines it, `esterror_us` its estimated error.
    Both None where adjtimex is unavailable."""
    unknown: dict[str, Any] = {"synced": None, "esterror_us": None}
    name = ctypes.util.find_library("c")
    if name is None:
        return unknown
    with contextlib.suppress(OSError, AttributeError):
        timex = _Timex()  # modes 0: read only, no privilege needed
        state = ctypes.CDLL(name, use_errno=True).adjtimex(ctypes.byref(timex))
        if state < 0:
            return unknown
        synced = state != TIME_ERROR and not timex.status & STA_UNSYNC
        return {"synced": bool(synced), "esterror_us": int(timex.esterror)}
    return unknown


def boot_id() -> str | None:
    """Same value <=> same boot of the same machine <=> one CLOCK_MONOTONIC."""
    try:
        return Path("/proc/sys/kernel/random/boot_id").read_text().strip() or None
    except OSError:
        return None


def clock_facts(start: ClockPair, end: ClockPair | None) -> ClockFacts:
    """What run.json keeps per point for `loadgen merge` (see the module doc)."""
    error = kernel_clock_error()
    return ClockFacts(
        boot_id=boot_id(),
        start_mono_ns=start.mono_ns,
        start_unix_ns=start.unix_ns,
        pair_read_ns=start.read_ns,
        # A wall clock stepped during the point moves `unix - mono`: the step is an error
        # of the alignment too.
        offset_change_ns=None if end is None else end.offset_ns - start.offset_ns,
        synced=error["synced"],
        esterror_us=error["esterror_us"],
    )
