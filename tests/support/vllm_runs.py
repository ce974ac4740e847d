"""The `loadgen` CLI run against a real vLLM server of the pool (tests/support/
vllm_servers.py), and what the vllm integration tests read back: a point's file, its
records, one of the server's counters."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from loadgen.records import RequestRecord
from loadgen.results.jsonl import read_jsonl
from tests.support.vllm_servers import VllmServer


def run_loadgen(
    server: VllmServer, results: Path, *extra: str, timeout_s: float = 600.0
) -> subprocess.CompletedProcess[str]:
    argv = [
        sys.executable,
        "-m",
        "loadgen",
        "--base-url",
        server.url,
        "--model",
        "tiny",
        "--encoder",
        "raw",
        "--tokenizer",
        str(server.model),
        "--results",
        str(results),
        "--no-progress",
        "--request-timeout",
        "120",
        "--seed",
        "0",
        *extra,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout_s, check=False)
    print(f"$ {' '.join(argv)}\nexit {done.returncode}\n{done.stdout}\n{done.stderr}")
    return done


def point(results: Path, conc: int) -> dict[str, Any]:
    data: dict[str, Any] = json.loads((results / f"conc_{conc}.json").read_text())
    return data


def records(results: Path, conc: int) -> list[RequestRecord]:
    return read_jsonl(results / f"requests_conc_{conc}.jsonl")


def server_counter(server: VllmServer, name: str) -> float:
    """Sum of every sample of one vLLM counter (all label sets)."""
    text = server.get("/metrics").decode()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )
