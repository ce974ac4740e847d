"""`--resume` says what it resumes, and each attempt of a `--sim` run keeps its own
simulator.log: a real `python -m loadgen --sim` interrupted (SIGINT) in its second point,
then resumed."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson

from tests.support.procs import run_loadgen

FLAGS = [
    "--sim",
    "--conc",
    "1,2",
    "--isl",
    "48",
    "--osl",
    "300",
    "--prompts-per-conc",
    "4",
    "--warmup-per-conc",
    "0",
    "--encoder",
    "raw",
    "--no-progress",
    "--sim-args",
    "--step-fixed-ms 3",
]


def interrupted_in_second_point(results: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, "-m", "loadgen", *FLAGS, "--results", str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not (results / "conc_1.json").exists():
            assert time.monotonic() < deadline and process.poll() is None, "no first point"
            time.sleep(0.05)
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr


def test_resume_says_what_it_keeps_and_keeps_each_attempts_simulator_log(tmp_path: Path) -> None:
    results = tmp_path / "run"
    interrupted_in_second_point(results)
    first_log = (results / "simulator.log").read_bytes()
    assert first_log.strip().endswith(b"stopped")
    first_id = orjson.loads((results / "run.json").read_bytes())["run_id"]

    done = run_loadgen([*FLAGS, "--resume", str(results)])
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if line.startswith("loadgen: resuming")]
    assert said == [
        f"loadgen: resuming run {first_id} in {results} (attempt 2): 1 complete "
        "point(s) kept (conc 1), 1 to run (conc 2)"
    ]
    assert (results / "simulator.log").read_bytes() == first_log  # the first attempt's
    second_log = (results / "simulator_attempt2.log").read_text()
    assert second_log.strip().endswith("stopped") and "serving" in second_log
    run = orjson.loads((results / "run.json").read_bytes())
    assert len(run["attempts"]) == 2 and run["attempts"][1]["points"] == [2]
    assert [p["complete"] for p in run["points"]] == [True, True]
