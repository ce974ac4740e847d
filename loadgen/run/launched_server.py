"""`--serve-cmd`: the server a run launches for itself, measures, and stops.

The command is split like a shell and run without one (a shell between loadgen and the
server would be the process loadgen watches and signals), in a session of its own: its
process group holds the server and everything it spawns (vLLM's engine cores and
workers), Ctrl-C in a terminal reaches loadgen only, and loadgen stops the group itself.
`{port}` in the command (and in --serve-env values) becomes a free loopback port; the run
then targets http://127.0.0.1:<port> unless --base-url says where the server listens.

Start-up: ready once GET /health and GET /v1/models both answer 200, within
--serve-timeout; a progress line every PROGRESS_EVERY_S says how long it has waited and
the log's last line. A command that exits while loadgen waits, or a deadline passed,
is ServerFailedToStart with the log's last line.

Stop (whatever ended the run: its end, an error, Ctrl-C), said on stderr as it goes:
SIGINT to the group (vLLM's graceful shutdown), SIGTERM after SIGINT_GRACE_S, SIGKILL
after SIGTERM_GRACE_S more; a further Ctrl-C or SIGTERM meanwhile (the run's task
cancelled again) sends SIGKILL at once. The signals also reach the server's descendants
that left its group (run/server_processes.py). Then until none of those processes is left
and the port is free (PORT_FREE_WAIT_S), so the next lane's server can bind it; a process
SIGKILL cannot end (uninterruptible, in a driver call) is named by pid. The stop is a
coroutine on the run's loop, never a thread: a signal always reaches it, and nothing of it
is left running when the loop closes. A server that dies during the run is noticed by the
server watch (its pid, as --server-pid) and the error that stops the run gets the exit
status and the log's last line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

import aiohttp

from loadgen.client.http_session import open_session
from loadgen.client.preflight import server_version
from loadgen.config.redact import redact_command, redact_env, redact_output, secret_values
from loadgen.config.spec import RunSpec
from loadgen.config.target import PORT_PLACEHOLDER
from loadgen.errors import LoadgenError, ServerError
from loadgen.results.run_record import LaunchedServerFacts
from loadgen.run.server_processes import (
    MARK_NAME,
    ProcessStat,
    listening_pids,
    new_mark,
    same_process,
    server_processes,
)
from loadgen.wording import printable

HOST = "127.0.0.1"
POLL_S = 0.5  # readiness polls; each GET bounded by POLL_TIMEOUT_S
POLL_TIMEOUT_S = 5.0
PROGRESS_EVERY_S = 15.0
# vLLM shuts down on SIGINT in seconds (its engine cores and workers with it); a large
# model's workers may take longer to release the GPUs. SIGTERM next, SIGKILL last.
SIGINT_GRACE_S = 30.0
SIGTERM_GRACE_S = 15.0
SIGKILL_GRACE_S = 5.0
ESCALATION = (
    (signal.SIGINT, SIGINT_GRACE_S),
    (signal.SIGTERM, SIGTERM_GRACE_S),
    (signal.SIGKILL, SIGKILL_GRACE_S),
)
STOP_POLL_S = 0.05
SCAN_EVERY_S = 1.0  # /proc for the processes that left the group (one read per process)
PORT_FREE_WAIT_S = 30.0
LAST_LINE_LIMIT = 300
_TAIL_BYTES = 64 * 1024


class ServerFailedToStart(ServerError):
    """The launched server exited, or did not answer, before the run could start."""

    stop_reason = "server_failed_to_start"


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((HOST, 0))
        return int(sock.getsockname()[1])


def port_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        # as servers bind (uvicorn does): only a listener, not TIME_WAIT, holds the port
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((HOST, port))
        except OSError:
            return False
    return True


def last_log_line(path: Path, secrets: Sequence[str] = ()) -> str:
    """The log's last non-empty line, printable, redacted (`secrets`: the values its
    command and environment hide, which a server may echo) and cut short ("(no
    output)": none)."""
    try:
        with path.open("rb") as log:
            log.seek(max(0, log.seek(0, os.SEEK_END) - _TAIL_BYTES))
            tail = log.read().decode(errors="replace")
    except OSError:
        return "(no output)"
    lines = [line.strip() for line in tail.replace("\r", "\n").splitlines() if line.strip()]
    return printable(redact_output(lines[-1], secrets), LAST_LINE_LIMIT) if lines else "(no output)"


def group_alive(pgid: int) -> bool:
    """Whether any process of the group is left (a zombie of ours counts until reaped)."""
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


@dataclass(slots=True)
class LaunchedServer:
    """The running server: its process, where it listens, what run.json records."""

    argv: tuple[str, ...]
    env: tuple[tuple[str, str], ...]
    cwd: str | None
    port: int
    base_url: str
    log_path: Path
    process: subprocess.Popen[bytes]
    mark: str  # in its environment: finds the descendants that left its group
    launched_at: float = field(default_factory=time.monotonic)
    startup_s: float | None = None
    version: str | None = None
    stopped_by: str | None = None

    @property
    def pid(self) -> int:
        return self.process.pid

    def secrets(self) -> list[str]:
        return secret_values(self.argv, self.env)

    def facts(self) -> LaunchedServerFacts:
        exited = self.process.poll()
        return LaunchedServerFacts(
            command=tuple(redact_command(self.argv)),
            env=redact_env(self.env),
            cwd=self.cwd,
            port=self.port,
            pid=self.pid,
            log=self.log_path.name,
            startup_s=self.startup_s,
            version=self.version,
            exit_status=exited,
            stopped_by=self.stopped_by,
            last_log_line=last_log_line(self.log_path, self.secrets())
            if exited is not None
            else None,
        )

    def exit_line(self) -> str:
        """How it ended, in words, with its log's last line."""
        status = self.process.returncode
        how = (
            f"was ended by signal {signal.Signals(-status).name}"
            if status is not None and status < 0
            else f"exited with status {status}"
        )
        return f"the launched server {how}; {self.log_path.name}'s last line: " + last_log_line(
            self.log_path, self.secrets()
        )


@contextlib.asynccontextmanager
async def launched_server(
    spec: RunSpec, log_path: Path, headers: Mapping[str, str] | None = None
) -> AsyncIterator[LaunchedServer]:
    """Launch spec.target.serve_cmd, wait until it serves, yield it; stop it on exit."""
    target = spec.target
    given = target.base_url.rstrip("/") if target.base_url else None
    placeholder = any(PORT_PLACEHOLDER in arg for arg in target.serve_cmd)
    port = free_port() if placeholder else (urlsplit(given).port or 80 if given else 0)
    argv = tuple(arg.replace(PORT_PLACEHOLDER, str(port)) for arg in target.serve_cmd)
    env = tuple((n, v.replace(PORT_PLACEHOLDER, str(port))) for n, v in target.serve_env)
    base_url = given or f"http://{HOST}:{port}"
    if not placeholder:  # a fixed port: another server on it would answer for this one
        _check_port_unheld(port)
    mark = new_mark()
    try:
        process, log = _spawn(argv, (*env, (MARK_NAME, mark)), target.serve_cwd, log_path)
    except OSError as exc:
        raise ServerFailedToStart(
            f"--serve-cmd {redact_command(argv[:1])[0]!r}: cannot start it: "
            f"{exc.strerror or exc}"
            + (f" (--serve-cwd {target.serve_cwd})" if target.serve_cwd else "")
        ) from None
    server = LaunchedServer(argv, env, target.serve_cwd, port, base_url, log_path, process, mark)
    print(
        f"loadgen: launched the server (pid {process.pid}, port {port}); its output goes to "
        f"{log_path}",
        file=sys.stderr,
    )
    interrupted = False  # by Ctrl-C or SIGTERM: the stop's line says "Ctrl-C again"
    try:
        await _wait_ready(server, target.serve_timeout_s, headers)
        yield server
    except BaseException as exc:
        interrupted = isinstance(exc, asyncio.CancelledError)
        gone = any(isinstance(e, ServerError) for e in _run_level_errors(exc))
        if await _reaped(process, REAP_GRACE_S if gone else 0.0):
            # it died under the run: say how, in the stop's line
            for error in _run_level_errors(exc):
                if isinstance(error, ServerFailedToStart):
                    continue  # its line says so already
                error.args = (f"{error}; {server.exit_line()}",)  # as stops.add_context
        raise
    finally:
        try:
            if await _Stop(server, interrupted).run():
                raise asyncio.CancelledError  # the run was asked to stop meanwhile
        finally:
            log.close()


def _check_port_unheld(port: int) -> None:
    """ServerFailedToStart when a process listens on `port` already: the launched server
    would fail to bind it, and the one there would answer /health and be measured."""
    holders = listening_pids(port)
    if holders is None:  # no /proc: a loopback bind tells whether it is taken
        holders = [] if port_free(port) else [ProcessStat(0, "a process", "S", 0, "")]
    if holders:
        who = ", ".join(h.said() if h.pid else h.name for h in holders)
        raise ServerFailedToStart(
            f"--serve-cmd: port {port} is already in use (listening: {printable(who)}); the "
            "launched server could not bind it and that one would be measured instead: stop "
            f"it, or put {PORT_PLACEHOLDER} in the command for a free port"
        )


def _spawn(
    argv: tuple[str, ...], env: tuple[tuple[str, str], ...], cwd: str | None, log_path: Path
) -> tuple[subprocess.Popen[bytes], IO[bytes]]:
    """The process, its output to the log file (never a pipe nobody drains), in its own
    session: its group holds everything it spawns, and the terminal's Ctrl-C is loadgen's."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    log = open(log_path, "wb")  # noqa: SIM115 (closed after the server, by the caller)
    try:
        process = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env={**os.environ, **dict(env)},
            cwd=cwd,
            start_new_session=True,
        )
    except OSError:
        log.close()
        raise
    return process, log


# A killed process's threads exit one by one: its leader shows as a zombie (the watch's
# "has exited") before waitpid can reap the whole group and give its status. A suite
# run caught the stop's line without "ended by signal SIGKILL" in that moment.
REAP_GRACE_S = 1.0


async def _reaped(process: subprocess.Popen[bytes], grace_s: float) -> bool:
    """Whether the process has ended (and its status is known), waiting up to grace_s."""
    deadline = time.monotonic() + grace_s
    while process.poll() is None:
        if time.monotonic() >= deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def _run_level_errors(exc: BaseException) -> list[LoadgenError]:
    if isinstance(exc, LoadgenError):
        return [exc]
    if isinstance(exc, BaseExceptionGroup):
        return [e for inner in exc.exceptions for e in _run_level_errors(inner)]
    return []


async def _wait_ready(
    server: LaunchedServer, timeout_s: float, headers: Mapping[str, str] | None
) -> None:
    """Until /health and /v1/models answer 200; ServerFailedToStart when the process
    exits first or the deadline passes (the group is stopped by the caller)."""
    started = server.launched_at
    said = time.monotonic()
    async with open_session(
        timeout_s=POLL_TIMEOUT_S, max_connections=1, headers=headers
    ) as session:
        while True:
            if server.process.poll() is not None:
                raise ServerFailedToStart(
                    f"--serve-cmd: {server.exit_line()} (before answering /health; "
                    f"full log: {server.log_path})"
                )
            if await _answers(session, server.base_url):
                break
            now = time.monotonic()
            if now - started >= timeout_s:
                raise ServerFailedToStart(
                    f"--serve-cmd: the server did not answer /health and /v1/models within "
                    f"{timeout_s:g} s (--serve-timeout); {server.log_path.name}'s last line: "
                    f"{last_log_line(server.log_path, server.secrets())}"
                )
            if now - said >= PROGRESS_EVERY_S:
                said = now
                print(
                    f"loadgen: waiting for the launched server: {now - started:.0f} s of "
                    f"{timeout_s:g} s; {server.log_path.name}: "
                    f"{last_log_line(server.log_path, server.secrets())}",
                    file=sys.stderr,
                )
            await asyncio.sleep(POLL_S)
        if server.process.poll() is not None:  # another answered for it, as it died
            raise ServerFailedToStart(
                f"--serve-cmd: {server.exit_line()} (while {server.base_url} answered /health: "
                f"another server answers there; full log: {server.log_path})"
            )
        server.startup_s = round(time.monotonic() - started, 3)
        with contextlib.suppress(aiohttp.ClientError, OSError, TimeoutError, LoadgenError):
            server.version = await server_version(session, server.base_url)
    print(
        f"loadgen: the launched server answers at {server.base_url} after "
        f"{server.startup_s:.1f} s" + (f" (version {server.version})" if server.version else ""),
        file=sys.stderr,
    )


async def _answers(session: aiohttp.ClientSession, base_url: str) -> bool:
    for path in ("/health", "/v1/models"):
        try:
            async with session.get(base_url + path) as response:
                await response.read()
                if response.status != 200:
                    return False
        except (aiohttp.ClientError, OSError, TimeoutError):
            return False
    return True


class _Stop:
    """The escalation, one phase of ESCALATION at a time: its signal to every process of
    the server, then its grace for them to go. The grace passed moves to the next phase;
    a further stop asked for (the task cancelled again) moves to SIGKILL at once."""

    def __init__(self, server: LaunchedServer, interrupted: bool) -> None:
        self.server = server
        self.ctrl_c = "Ctrl-C again" if interrupted else "Ctrl-C"  # what kills it now
        self.pgid = server.pid  # a session leader: its pid is its group's
        self.phase = -1  # none sent yet
        self.deadline = 0.0
        self.escaped: dict[int, ProcessStat] = {}  # left the group (setsid), by pid
        self.scanned = -SCAN_EVERY_S
        self.members = True  # a live process in the group, as the last scan saw

    async def run(self) -> bool:
        """Until every process is gone and the port free; whether the task was cancelled
        meanwhile (the caller raises it then: the run was asked to stop)."""
        if not self._alive():
            return False
        self._send(0)
        sigint, sigterm = (f"{grace:g} s" for _, grace in ESCALATION[:2])
        _say(
            f"stopping the launched server (pid {self.pgid}): SIGINT sent{self._to()}; "
            f"SIGTERM in {sigint}, SIGKILL {sigterm} later; {self.ctrl_c} kills it now"
        )
        cancelled = False
        while self._alive():
            if time.monotonic() >= self.deadline:
                if self.phase == len(ESCALATION) - 1:
                    self._survivors()
                    break
                self._escalate()
            try:
                await asyncio.sleep(STOP_POLL_S)
            except asyncio.CancelledError:
                cancelled = True
                self._hurry()
        deadline = time.monotonic() + PORT_FREE_WAIT_S
        while not cancelled and not port_free(self.server.port) and time.monotonic() < deadline:
            try:
                await asyncio.sleep(0.1)
            except asyncio.CancelledError:  # nothing of the server is left to stop
                cancelled = True
        return cancelled

    def _alive(self) -> bool:
        self.server.process.poll()  # reap the leader: a zombie still counts as in the group
        now = time.monotonic()
        if now - self.scanned >= SCAN_EVERY_S:
            self.scanned = now
            self._scan()
        self.escaped = {
            pid: known for pid, known in self.escaped.items() if same_process(known) is not None
        }
        # killpg(0) counts zombies too: those left to init once the leader is gone, which
        # it reaps when it gets to them; the scan tells them apart
        return (group_alive(self.pgid) and self.members) or bool(self.escaped)

    def _scan(self) -> None:
        found = server_processes(self.pgid, self.server.mark)
        self.members = found is None or any(f.pgid == self.pgid for f in found)
        for new in found or ():
            if new.pgid == self.pgid or new.pid in self.escaped:
                continue
            self.escaped[new.pid] = new
            if self.phase >= 0:  # found after the first signal: said as found
                _say(
                    f"process {new.said()} of the launched server left its process group; "
                    "it is stopped with it"
                )
                self._signal(new, ESCALATION[self.phase][0])

    def _send(self, phase: int) -> None:
        self.phase = phase
        sig, grace = ESCALATION[phase]
        self.server.stopped_by = sig.name
        with contextlib.suppress(ProcessLookupError, PermissionError):  # none left to signal
            os.killpg(self.pgid, sig)
        for known in self.escaped.values():
            self._signal(known, sig)
        self.deadline = time.monotonic() + grace

    @staticmethod
    def _signal(known: ProcessStat, sig: signal.Signals) -> None:
        if same_process(known) is not None:  # never a pid the kernel has given to another
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(known.pid, sig)

    def _escalate(self) -> None:
        before, grace = ESCALATION[self.phase]
        self._send(self.phase + 1)
        sig = ESCALATION[self.phase][0]
        after = (
            f"; SIGKILL in {ESCALATION[self.phase][1]:g} s; {self.ctrl_c} kills it now"
            if sig != signal.SIGKILL
            else ""
        )
        _say(
            f"the launched server (pid {self.pgid}) is still running {grace:g} s after "
            f"{before.name}: {sig.name} sent{self._to()}{after}"
        )

    def _hurry(self) -> None:
        if ESCALATION[self.phase][0] == signal.SIGKILL:
            return  # sent already: the rest is the kernel's
        self._send(len(ESCALATION) - 1)
        _say(
            f"interrupted while stopping the launched server (pid {self.pgid}): killed now, "
            f"SIGKILL sent{self._to()}"
        )

    def _to(self) -> str:
        """Where a signal went: the group, and the processes that left it."""
        if not self.escaped:
            return " to its process group"
        return " to its process group and to the processes that left it: " + ", ".join(
            known.said() for known in self.escaped.values()
        )

    def _survivors(self) -> None:
        left = server_processes(self.pgid, self.server.mark)
        named = ", ".join(found.said() for found in left or ()) or f"group {self.pgid}"
        _say(
            f"WARNING: processes of the launched server are still there "
            f"{SIGKILL_GRACE_S:g} s after SIGKILL (uninterruptible, e.g. in a driver call): "
            f"{named}; loadgen stops waiting for them"
        )


def _say(line: str) -> None:
    print(f"loadgen: {line}", file=sys.stderr, flush=True)
