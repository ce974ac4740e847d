"""Shards as real `loadgen` processes meeting at a coordinator (tests/scale/
test_coordinator*.py): their command lines, their processes, and what their result
directories hold."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

from loadgen.records import ErrorKind
from loadgen.results.jsonl import read_jsonl

SIM = ("--step-fixed-ms", "3", "--decode-token-us", "20", "--prefill-token-us", "2", "--seed", "5")
TOKEN = "test-secret"
SHARDS = 4
# Per-point figures that must equal one process's: counts and what the seeds decide.
SAME_AS_ONE = (
    "num_prompts",
    "completed",
    "failed",
    "total_input_tokens",
    "total_output_tokens",
    "total_chunks",
    "planned_requests",
    "warmup_requests",
    "stream_acceptance_length",
    "max_concurrency",
)
# Fields of a merged point that name the merge itself, not what was measured.
MERGE_IDENTITY = ("run_id", "timestamp", "date")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def shard_argv(
    url: str, results: Path, index: int, count: int, port: int, *extra: str
) -> list[str]:
    return [
        sys.executable,
        "-m",
        "loadgen",
        "--base-url",
        url,
        "--isl",
        "64",
        "--no-progress",
        "--results",
        str(results),
        "--shard",
        f"{index}/{count}",
        "--coordinator",
        f"127.0.0.1:{port}",
        *extra,
    ]


class Shards:
    """Started shard processes, each stopped by the test if it is still running."""

    def __init__(self) -> None:
        self.procs: list[subprocess.Popen[str]] = []

    def start(
        self, argv: Sequence[str], env: dict[str, str] | None = None
    ) -> subprocess.Popen[str]:
        proc = subprocess.Popen(
            list(argv),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
            env={**os.environ, **(env or {})},
        )
        self.procs.append(proc)
        return proc

    def stop_all(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
            proc.communicate(timeout=30)


def finish(proc: subprocess.Popen[str], timeout: float = 120) -> tuple[int, str]:
    try:
        _, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        _, err = proc.communicate(timeout=30)
        raise AssertionError(f"still running after {timeout} s; its stderr: {err}") from None
    return proc.returncode, err


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.startswith("loadgen: error:")]


def merge_cli(dirs: list[Path], out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen", "merge", *map(str, dirs), "--results", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def point(results: Path, conc: int) -> tuple[dict[str, Any], dict[int, tuple[int, ...]]]:
    result = orjson.loads((results / f"conc_{conc}.json").read_bytes())
    records = read_jsonl(results / f"requests_conc_{conc}.jsonl")
    return result, {r.request_id: r.chunk_tokens for r in records}


def wait_measuring(results: Path, conc: int, timeout: float = 60) -> None:
    """Until the shard's measured phase has records on disk (each is written at once)."""
    path = results / f"requests_conc_{conc}.jsonl"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.is_file() and path.stat().st_size > 0:
            return
        time.sleep(0.05)
    raise AssertionError(f"{path}: no record within {timeout} s")


def stopped_at_ns(results: Path, conc: int) -> int:
    """When the shard's point stopped: its cancelled requests' end (CLOCK_MONOTONIC, which
    processes of one machine share)."""
    records = read_jsonl(results / f"requests_conc_{conc}.jsonl")
    cancelled = [r.end_ns for r in records if r.error == ErrorKind.CANCELLED]
    assert cancelled, f"{results}: no request was in flight when the point stopped"
    return max(cancelled)
