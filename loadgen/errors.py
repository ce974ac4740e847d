"""One exception tree for run-level failures, each class carrying its exit status.

A per-request failure is never an exception past the transport: it is an `ErrorKind` on
the record. What ends a run is one of these, and `loadgen.cli` maps every one of them to
one line on stderr and its `exit_code` in a single place.
"""

from __future__ import annotations


class LoadgenError(Exception):
    """A run-level failure; str() is the line to show (what is wrong, what to do)."""

    exit_code = 1


class UsageError(LoadgenError, ValueError):
    """Bad input: a flag, an option, a file. The user fixes the command line."""

    exit_code = 2


class ServerError(LoadgenError):
    """The server is unreachable, serves something else, or stopped answering."""


class SetupError(LoadgenError):
    """This machine cannot run the job: tokenizer, embedded simulator, disk, limits."""


class Interrupted(LoadgenError):
    """Ctrl-C, SIGTERM or the sidecar's DELETE; what was measured is on disk."""

    exit_code = 130
