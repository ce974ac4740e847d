"""Why a sweep stopped early: the run-level error, and the code written as `stop_reason`
(each error class carries its own: loadgen/errors.py).

A run-level error raised inside a request's task (a full disk under the JSONL sink, no
file descriptors left, the server gone) reaches the sweep wrapped in the ExceptionGroup
of every TaskGroup it crossed; `run_level_error` takes it out again, so the CLI shows
its one line. A group holding anything else is a programming error and stays a
traceback.
"""

from __future__ import annotations

import asyncio
import errno

from loadgen.client.transport import OutOfDescriptors, descriptors_exhausted
from loadgen.errors import LoadgenError
from loadgen.results.outcome import Stop

INTERRUPTED_DETAIL = "stopped by Ctrl-C, SIGTERM, SIGHUP or the sidecar's DELETE"


def stop_of(stop: LoadgenError | None) -> Stop | None:
    """A point's stop fields for the error that stopped the run (None: not stopped): its
    class's code (loadgen/errors.py draws every class with it) and its line."""
    return None if stop is None else Stop(stop.stop_reason, str(stop))


# Not an error: an open-loop point the server fell behind (metrics/saturation.py); the
# sweep runs no higher point after it.
SATURATED = "saturated"


def _leaves(group: BaseExceptionGroup[BaseException]) -> list[BaseException]:
    leaves: list[BaseException] = []
    for exc in group.exceptions:
        leaves += _leaves(exc) if isinstance(exc, BaseExceptionGroup) else [exc]
    return leaves


def out_of_descriptors(exc: BaseException) -> OutOfDescriptors | None:
    """The stop for an exception that EMFILE/ENFILE caused (a lazy import, a file open, a
    connect: raised as it is or as the cause of another), else None."""
    seen: BaseException | None = exc
    for _ in range(16):  # a chain of causes is short; never follow a cycle for ever
        if seen is None:
            return None
        if isinstance(seen, OSError) and seen.errno in (errno.EMFILE, errno.ENFILE):
            return descriptors_exhausted(seen)
        seen = seen.__cause__ or seen.__context__
    return None


def run_level_error(group: BaseExceptionGroup[BaseException]) -> LoadgenError:
    """The first run-level error in `group`; re-raises `group` when it holds anything else
    (a bug must not pass for a clean stop). Running out of descriptors anywhere is the
    documented stop, not a bug: the process hit a limit of the machine."""
    leaves = [out_of_descriptors(e) or e for e in _leaves(group)]
    run_level = [e for e in leaves if isinstance(e, LoadgenError)]
    others = [e for e in leaves if not isinstance(e, LoadgenError | asyncio.CancelledError)]
    if others or not run_level:
        raise group
    return run_level[0]


def add_context(stop: LoadgenError, context: str) -> LoadgenError:
    """The same error, its line extended (where the run stopped, what is on disk)."""
    stop.args = (f"{stop}; {context}",)
    return stop
