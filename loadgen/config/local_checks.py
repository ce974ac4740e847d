"""Checks against this machine: a results directory that can be written, a process
that exists (build_spec.check_machine calls them, once per run built)."""

from __future__ import annotations

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
