"""Reading a run's files without ever following a symbolic link below the data directory.

loadgen never creates links in its data directory, so a link found there was planted:
listings skip it (with a warning in the log) and reads refuse it, at every path
component below the data directory (the data directory itself may be a link; it is
resolved once at start). Files are opened one component at a time relative to the
parent's descriptor with O_NOFOLLOW, so a link swapped in after a check cannot be
followed either; O_NONBLOCK keeps a planted FIFO from hanging the server, and anything
but a regular file is refused.
"""

from __future__ import annotations

import asyncio
import logging
import mimetypes
import os
import stat
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from aiohttp import web

log = logging.getLogger("loadgen.serve")
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK


class NotServed(Exception):
    """No regular file by that name (missing, a link, a directory, outside the root)."""


@dataclass(frozen=True, slots=True)
class ListedFile:
    name: str  # relative to the listed directory, `/`-separated
    size: int


def _parts(relative: str) -> tuple[str, ...]:
    parts = PurePosixPath(relative).parts
    if not parts or any(p in ("/", ".", "..") or "\0" in p for p in parts):
        raise NotServed(relative)
    return parts


@contextmanager
def open_beneath(root: Path, relative: str) -> Iterator[int]:
    """A read-only descriptor of the regular file `root/relative`, reached without
    following any link below `root`; NotServed otherwise. Closed on exit."""
    parts = _parts(relative)
    try:
        parent = os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise NotServed(relative) from exc
    fd = -1
    try:
        for part in parts[:-1]:
            child = os.open(part, _DIR_FLAGS, dir_fd=parent)
            os.close(parent)
            parent = child
        fd = os.open(parts[-1], _FILE_FLAGS, dir_fd=parent)
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise NotServed(relative)
    except OSError as exc:  # ELOOP/ENOTDIR for a link, ENOENT, EACCES, ...
        if fd >= 0:
            os.close(fd)
        raise NotServed(relative) from exc
    except NotServed:
        os.close(fd)
        raise
    finally:
        os.close(parent)
    try:
        os.set_blocking(fd, True)
        yield fd
    finally:
        os.close(fd)


def read_beneath(root: Path, relative: str, limit: int) -> bytes:
    """The whole file (NotServed when it is larger than `limit` bytes)."""
    with open_beneath(root, relative) as fd:
        if os.fstat(fd).st_size > limit:
            raise NotServed(relative)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        return b"".join(chunks)


async def stream_file(request: web.Request, fd: int, name: str) -> web.StreamResponse:
    """The file behind `fd` as the response body: as many bytes as it had when opened
    (a JSONL still being appended to ends at a line the writer had not finished)."""
    remaining = os.fstat(fd).st_size
    content_type = mimetypes.guess_type(name)[0] or "application/octet-stream"
    response = web.StreamResponse(headers={"Content-Type": content_type})
    response.content_length = remaining
    await response.prepare(request)
    while remaining > 0:
        chunk = await asyncio.to_thread(os.read, fd, min(remaining, 1 << 20))
        if not chunk:  # truncated since: the declared length can no longer be met
            break
        remaining -= len(chunk)
        await response.write(chunk)
    await response.write_eof()
    return response


def list_beneath(root: Path, relative: str) -> list[ListedFile]:
    """Regular files under `root/relative` (recursively, names sorted), links skipped,
    hidden files (the atomic writer's temporaries) left out. [] when there is no such
    directory or it is reached through a link."""
    directory = root.joinpath(*_parts(relative))
    if any(
        p.is_symlink()
        for p in (directory, *directory.parents)
        if p.is_relative_to(root) and p != root
    ):
        log.warning("loadgen serve: %s is a symbolic link; not listed", directory)
        return []
    found: list[ListedFile] = []
    _walk(directory, "", found)
    return sorted(found, key=lambda f: f.name)


def _walk(directory: Path, prefix: str, found: list[ListedFile]) -> None:
    try:
        entries = list(os.scandir(directory))
    except OSError:
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        name = f"{prefix}{entry.name}"
        if entry.is_symlink():
            log.warning("loadgen serve: %s is a symbolic link; not listed or served", entry.path)
        elif entry.is_dir(follow_symlinks=False):
            _walk(Path(entry.path), f"{name}/", found)
        elif entry.is_file(follow_symlinks=False):
            found.append(ListedFile(name, entry.stat(follow_symlinks=False).st_size))
