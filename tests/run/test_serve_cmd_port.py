"""--serve-cmd with a fixed port that another server already listens on: refused before
anything is launched, in one line naming who holds the port, instead of measuring the
other server (the launched one dies on "address already in use" while the other answers
/health). Real processes: the other server is a `loadgen sim` this test starts, the
launched command is `loadgen sim` on the same port, the CLI runs as `python -m loadgen`."""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
from pathlib import Path

from tests.support.procs import one_error_line, run_loadgen, wait_until

PY = shlex.quote(sys.executable)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def answers(port: int) -> bool:
    with socket.socket() as sock:
        sock.settimeout(0.5)
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_a_fixed_port_someone_else_holds_is_refused(tmp_path: Path) -> None:
    port = free_port()
    other = subprocess.Popen(
        [sys.executable, "-m", "loadgen", "sim", "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
    )
    try:
        wait_until(lambda: answers(port), 60, "the other server to listen")
        done = run_loadgen(
            [
                "--serve-cmd",
                f"{PY} -m loadgen sim --port {port}",
                "--base-url",
                f"http://127.0.0.1:{port}",
                "--conc",
                "1",
                "--isl",
                "32",
                "--osl",
                "8",
                "--encoder",
                "raw",
                "--prompts-per-conc",
                "2",
                "--results",
                str(tmp_path / "r"),
            ],
            timeout=120,
        )
        line = one_error_line(done.stderr)
        assert done.returncode == 1, done.stderr
        assert f"port {port} is already in use (listening: {other.pid} (" in line, line
        assert "{port}" in line  # what to do instead
        assert "launched the server" not in done.stderr  # nothing was started
        assert not list((tmp_path / "r").glob("conc_*.json"))  # nothing was measured
        assert other.poll() is None and answers(port)  # the other server is left alone
    finally:
        other.terminate()
        other.wait(timeout=30)
    assert not os.path.exists(tmp_path / "r" / "server.log") or (
        (tmp_path / "r" / "server.log").read_bytes() == b""
    )
