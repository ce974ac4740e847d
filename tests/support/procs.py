"""Real processes for the run-level failure tests: `loadgen sim` and the `loadgen` CLI.

The simulator runs as its own process (the tests kill it, freeze it, restart it on the
same port); the CLI runs as `python -m loadgen`, exactly as a user runs it.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import orjson

from loadgen.results.jsonl import read_jsonl

# Fast points: 3 ms steps, 64-token prompts; the raw encoder skips the DeepSeek template.
SMALL = ["--isl", "48", "--osl", "120", "--encoder", "raw", "--no-progress"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def start_sim(port: int, log: Path, *extra: str) -> subprocess.Popen[bytes]:
    """`loadgen sim` on 127.0.0.1:port, answering /health before this returns."""
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loadgen",
                "sim",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--step-fixed-ms",
                "3",
                "--spin-us",
                "0",
                *extra,
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert process.poll() is None, log.read_text()
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1):
                return process
        except OSError:
            time.sleep(0.1)
    process.kill()
    raise AssertionError(f"the simulator did not come up: {log.read_text()}")


def stop(process: subprocess.Popen[Any]) -> None:
    if process.poll() is None:
        process.kill()
    process.wait(timeout=30)


@contextlib.contextmanager
def simulator(log: Path) -> Iterator[str]:
    """A `loadgen sim` on a free loopback port for the block: its base URL."""
    port = free_port()
    sim = start_sim(port, log)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(sim)


def loadgen(args: Sequence[str], **popen: Any) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "loadgen", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        **popen,
    )


def run_loadgen(
    args: Sequence[str], timeout: float = 240, **popen: Any
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        **popen,
    )


def wait_until(condition: Callable[[], bool], timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)


def lines_in(path: Path) -> int:
    return path.read_bytes().count(b"\n") if path.exists() else 0


def one_error_line(stderr: str) -> str:
    """The one `loadgen: error:` line, asserting there is no traceback around it."""
    assert "Traceback" not in stderr, stderr
    errors = [line for line in stderr.splitlines() if line.startswith("loadgen: error:")]
    assert len(errors) == 1, stderr
    return errors[0]


def point(results: Path, conc: int) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads((results / f"conc_{conc}.json").read_bytes())
    return data


def run_file(results: Path) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads((results / "run.json").read_bytes())
    return data


def whole_lines(path: Path) -> int:
    """Records in a JSONL file, asserting it ends on a whole line."""
    data = path.read_bytes()
    assert not data or data.endswith(b"\n"), f"{path} ends in a torn line"
    return len(read_jsonl(path))
