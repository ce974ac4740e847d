"""The processes of a server loadgen launched, read from /proc: the members of its process
group, and its descendants that left the group (a setsid() child, a daemon's double fork),
which killpg() cannot reach and no ppid chain leads to once their parent is gone.

Those are found by a mark: loadgen puts MARK_NAME=<a value of this launch> in the server's
environment, every descendant inherits it (unless it replaces its whole environment), and
/proc/<pid>/environ shows it for the processes of loadgen's own user. Without /proc (not
Linux) nothing is found: the group alone is stopped (killpg).
"""

from __future__ import annotations

import contextlib
import os
import secrets
from dataclasses import dataclass
from pathlib import Path

MARK_NAME = "LOADGEN_LAUNCHED_SERVER"
_PROC = Path("/proc")


def new_mark() -> str:
    """A value no other launch has: this loadgen's pid and a random token."""
    return f"{os.getpid()}-{secrets.token_hex(8)}"


@dataclass(frozen=True, slots=True)
class ProcessStat:
    """One process as /proc/<pid>/stat shows it."""

    pid: int
    name: str
    state: str  # R, S, D, T, Z...
    pgid: int
    start: str  # start time in clock ticks: a pid reused later is another process

    @property
    def zombie(self) -> bool:
        return self.state in ("Z", "X")

    def said(self) -> str:
        return f"{self.pid} ({self.name})"


def process_stat(pid: int) -> ProcessStat | None:
    """None when there is no such process (or no /proc to read it from)."""
    try:
        data = (_PROC / str(pid) / "stat").read_bytes()
    except OSError:
        return None
    opened, closed = data.index(b"("), data.rindex(b")")  # the name may hold spaces and ')'
    fields = data[closed + 2 :].split()
    return ProcessStat(
        pid,
        data[opened + 1 : closed].decode(errors="replace"),
        fields[0].decode(),  # field 3
        int(fields[2]),  # field 5
        fields[19].decode(),  # field 22
    )


def same_process(known: ProcessStat) -> ProcessStat | None:
    """The process `known` names, now; None once it is gone, a zombie, or its pid reused."""
    now = process_stat(known.pid)
    return now if now is not None and not now.zombie and now.start == known.start else None


def _marked(pid: int, mark: bytes) -> bool:
    try:
        environ = (_PROC / str(pid) / "environ").read_bytes()
    except OSError:  # gone, or another user's
        return False
    return environ.startswith(mark) or b"\0" + mark in environ


def server_processes(pgid: int, mark: str) -> list[ProcessStat] | None:
    """Every live process of the group, and every one outside it that carries the mark;
    None without /proc to read."""
    entry = f"{MARK_NAME}={mark}\0".encode()
    try:
        pids = [int(name) for name in os.listdir(_PROC) if name.isdigit()]
    except OSError:
        return None
    found = []
    for pid in pids:
        stat = process_stat(pid)
        if stat is None or stat.zombie:  # a zombie holds no port, memory or GPU
            continue
        if stat.pgid == pgid or _marked(pid, entry):
            found.append(stat)
    return found


def listening_pids(port: int) -> list[ProcessStat] | None:
    """The processes holding a TCP socket that listens on `port` (any address, IPv4 or
    IPv6); None without /proc to read. Another user's process shows only as the socket,
    not its holder: then a ProcessStat of pid 0 stands for it."""
    inodes: set[str] = set()
    try:
        for table in ("tcp", "tcp6"):
            with contextlib.suppress(FileNotFoundError):
                for line in (_PROC / "net" / table).read_text().splitlines()[1:]:
                    fields = line.split()
                    local, state, inode = fields[1], fields[3], fields[9]
                    if state == "0A" and int(local.rsplit(":", 1)[1], 16) == port:
                        inodes.add(inode)
    except OSError:
        return None
    if not inodes:
        return []
    wanted = {f"socket:[{inode}]" for inode in inodes}
    holders = []
    for name in os.listdir(_PROC):
        if not name.isdigit():
            continue
        if _holds(_PROC / name / "fd", wanted) and (stat := process_stat(int(name))) is not None:
            holders.append(stat)
    return holders or [ProcessStat(0, "another user's process", "S", 0, "")]


def _holds(fds: Path, wanted: set[str]) -> bool:
    try:
        entries = list(fds.iterdir())
    except OSError:  # gone, or another user's
        return False
    for fd in entries:
        with contextlib.suppress(OSError):  # closed meanwhile
            if os.readlink(fd) in wanted:
                return True
    return False
