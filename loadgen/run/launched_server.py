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

Stop (whatever ended the run: its end, an error, Ctrl-C): SIGINT to the group (vLLM's
graceful shutdown), SIGTERM after SIGINT_GRACE_S, SIGKILL after SIGTERM_GRACE_S more; then
until no process of the group is left and the port is free (PORT_FREE_WAIT_S), so the
next lane's server can bind it. A server that dies during the run is noticed by the
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
    try:
        process, log = _spawn(argv, env, target.serve_cwd, log_path)
    except OSError as exc:
        raise ServerFailedToStart(
            f"--serve-cmd {redact_command(argv[:1])[0]!r}: cannot start it: "
            f"{exc.strerror or exc}"
            + (f" (--serve-cwd {target.serve_cwd})" if target.serve_cwd else "")
        ) from None
    server = LaunchedServer(argv, env, target.serve_cwd, port, base_url, log_path, process)
    print(
        f"loadgen: launched the server (pid {process.pid}, port {port}); its output goes to "
        f"{log_path}",
        file=sys.stderr,
    )
    try:
        await _wait_ready(server, target.serve_timeout_s, headers)
        yield server
    except BaseException as exc:
        if process.poll() is not None:  # it died under the run: say how, in the stop's line
            for error in _run_level_errors(exc):
                if isinstance(error, ServerFailedToStart):
                    continue  # its line says so already
                error.args = (f"{error}; {server.exit_line()}",)  # as stops.add_context
        raise
    finally:
        # shielded: a second Ctrl-C must not leave the group running
        with contextlib.suppress(asyncio.CancelledError):
            await asyncio.shield(asyncio.to_thread(_stop, server))
        log.close()


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


def _stop(server: LaunchedServer) -> None:
    """SIGINT, SIGTERM, SIGKILL to the whole group, each after the one before had its
    grace; then wait until the group is gone and the port free (blocking: a thread)."""
    process, pgid = server.process, server.pid  # a session leader: its pid is the group's
    for sig, grace in (
        (signal.SIGINT, SIGINT_GRACE_S),
        (signal.SIGTERM, SIGTERM_GRACE_S),
        (signal.SIGKILL, SIGKILL_GRACE_S),
    ):
        process.poll()  # reap the leader if it is gone (a zombie still counts as in the group)
        if not group_alive(pgid):
            break
        server.stopped_by = sig.name
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            process.poll()
            if not group_alive(pgid):
                break
            time.sleep(0.05)
    process.poll()
    if group_alive(pgid):  # unkillable (uninterruptible I/O): said, never hidden
        print(
            f"loadgen: WARNING: processes of the launched server's group {pgid} are still "
            "there after SIGKILL",
            file=sys.stderr,
        )
    deadline = time.monotonic() + PORT_FREE_WAIT_S
    while not port_free(server.port) and time.monotonic() < deadline:
        time.sleep(0.1)
