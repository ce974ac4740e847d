"""The one atomic writer of result files.

Files are written atomically (temp file in the same directory, fsync, os.replace), so a
crash or Ctrl-C leaves either the previous file or the new one, never half of one. A
failed write (disk full, I/O error, read-only) leaves no temp file behind and raises
ResultsWriteError, which stops the run with one line.
"""

from __future__ import annotations

import contextlib
import errno
import os
import tempfile
from pathlib import Path

from loadgen.errors import SetupError


class ResultsWriteError(SetupError):
    """A result file could not be written (disk full, I/O error, read-only, quota, file
    size limit, directory removed...); str() says which, why, and what is intact."""

    stop_reason = "results_write_failed"

    def __init__(self, path: Path, exc: OSError, intact: str = "") -> None:
        why = exc.strerror or str(exc)
        name = errno.errorcode.get(exc.errno or 0, "")
        super().__init__(
            f"cannot write {path}: {why}{f' ({name})' if name else ''}"
            f"{f'; {intact}' if intact else ''}"
        )
        self.path = path
        self.errno = exc.errno


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def write_atomic(path: Path, data: bytes) -> Path:
    """Readers see the old file or the new one, never a torn one (rename is atomic).

    Readable like any other output (0666 less the umask): mkstemp's 0600 would hide
    results from the rest of a team on a shared volume.
    """
    try:
        return _write_atomic(path, data)
    except OSError as exc:  # this machine's disk, not a programming error
        raise ResultsWriteError(path, exc, "no partial file was left") from None


def _write_atomic(path: Path, data: bytes) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    return path
