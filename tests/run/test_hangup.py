"""SIGHUP (the terminal or the ssh session went away) stops a run as Ctrl-C does: one
line, exit 130, the point's summary and records kept. Real `python -m loadgen` processes;
the hangup goes to the whole process group, as a closing terminal sends it, so worker
processes (`--workers 2`) receive it too."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from loadgen.results.jsonl import read_jsonl


@pytest.mark.parametrize("workers", ["1", "2"])
def test_sighup_keeps_the_point_summary(tmp_path: Path, workers: str) -> None:
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
            "--encoder",
            "raw",
            "--workers",
            workers,
            "--results",
            str(tmp_path),
            "--no-progress",
            "--sim-args",
            "--step-fixed-ms 3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
        start_new_session=True,
    )  # its own process group, to hang up as a terminal does
    try:
        deadline = time.monotonic() + 90
        while not jsonl.exists() or jsonl.read_bytes().count(b"\n") < 2:
            assert time.monotonic() < deadline, "no request finished within 90 s"
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGHUP)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130, stderr
    assert "Traceback" not in stderr, stderr
    said = [line for line in stderr.splitlines() if "interrupted" in line]
    assert said == [
        f"loadgen: interrupted; everything measured so far is in {tmp_path} "
        "(the last point is marked complete: false)"
    ], stderr
    result = orjson.loads((tmp_path / "conc_2.json").read_bytes())
    records = read_jsonl(jsonl)
    assert result["complete"] is False and result["stop_reason"] == "interrupted"
    assert "SIGHUP" in result["stop_detail"]
    assert result["num_prompts"] == len(records) >= 2
    # the simulator had stopped before the point was finalized: its log was still read
    assert isinstance(result["simulator_behind_warnings"], int)
    run = orjson.loads((tmp_path / "run.json").read_bytes())
    assert run["interrupted"] is True and run["stop_reason"] == "interrupted"
