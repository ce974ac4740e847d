"""Ctrl-C (SIGINT to a real `python -m loadgen` process) leaves valid partial results."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson

from loadgen.records import ErrorKind
from loadgen.results.jsonl import read_jsonl


def test_sigint_keeps_partial_results(tmp_path: Path) -> None:
    jsonl = tmp_path / "requests_conc_2.jsonl"
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadgen",
            "--sim",
            "--conc",
            "2",
            "--isl",
            "48",
            "--osl",
            "300",
            "--prompts-per-conc",
            "50",
            "--warmup-per-conc",
            "0",
            "--results",
            str(tmp_path),
            "--no-progress",
            "--sim-args",
            "--step-fixed-ms 3 --spin-us 0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and (
            not jsonl.exists() or jsonl.read_bytes().count(b"\n") < 2
        ):
            time.sleep(0.05)
        assert jsonl.exists(), "no request finished within 60 s"
        time.sleep(0.2)  # let the slots' next requests receive something
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    assert "interrupted" in stderr and str(tmp_path) in stderr
    records = read_jsonl(jsonl)  # every line whole and valid
    assert len(records) >= 2 and jsonl.read_bytes().endswith(b"\n")
    cancelled = [r for r in records if r.error is ErrorKind.CANCELLED]
    assert len(cancelled) == 2  # the two in flight at Ctrl-C, with what they had received
    assert any(r.chunk_tokens for r in cancelled)
    assert all(sum(r.chunk_tokens) < 300 for r in cancelled)
    result = orjson.loads((tmp_path / "conc_2.json").read_bytes())
    assert result["complete"] is False and result["num_prompts"] == len(records)
    assert result["completed"] == len(records) - 2
    run = orjson.loads((tmp_path / "run.json").read_bytes())
    assert run["interrupted"] is True and run["points"][0]["complete"] is False
    assert (tmp_path / "simulator.log").read_text().strip().endswith("stopped")
