"""Checks against this machine: a results directory that can be written, a process
that exists (build_spec.check_machine calls them, once per run built), the memory a run
may hold (limits.py)."""

from __future__ import annotations

import contextlib
import functools
import os
from pathlib import Path

from loadgen.config.parsers import SpecError


def check_results_dir(path: Path) -> None:
    """`path` is a directory, or can be made one, that this process may write into.

    No side effect: the nearest existing ancestor decides. access(2) answers EROFS for a
    read-only mount even to root, so this holds inside containers too.
    """
    existing = path
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        what = "is a file" if existing == path else f"is under {existing}, which is a file"
        raise SpecError(f"--results {path}: {what}; give a directory")
    if not os.access(existing, os.W_OK | os.X_OK):
        where = "" if existing == path else f" ({existing} is where it would be created)"
        raise SpecError(
            f"--results {path}: not writable{where}: read-only or no permission; "
            "give a directory you can write"
        )


def process_exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True  # exists, owned by someone else: /proc still shows its state
    except OverflowError:
        return False
    return True


# cgroup v2, then v1: a container's memory limit, when one is set
CGROUP_MEMORY_LIMITS = (
    Path("/sys/fs/cgroup/memory.max"),
    Path("/sys/fs/cgroup/memory/memory.limit_in_bytes"),
)


@functools.cache
def memory_bytes() -> int:
    """The memory this process may use: the machine's, or its container's limit if lower."""
    limit = os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")
    for path in CGROUP_MEMORY_LIMITS:
        with contextlib.suppress(OSError, ValueError):
            limit = min(limit, int(path.read_text().strip()))  # "max": no limit (ValueError)
    return limit
