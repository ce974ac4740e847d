"""Descriptors running out mid-point somewhere other than a connect (a lazy import, a
file open) is the documented `out_of_file_descriptors` stop: one line, exit 1, the point
file kept marked complete: false; never an ExceptionGroup traceback with no point file.

A real `python -m loadgen --sim` under a low RLIMIT_NOFILE; once the point's first
record is on disk, a thread of the same process takes every descriptor left (a leak
elsewhere in the process), so the keep-alive connections go on and the next thing that
opens a file fails (here: numpy importing `numpy.ma` lazily while the point is summarized).
"""

from __future__ import annotations

import resource
import subprocess
import sys
from pathlib import Path

from tests.support.procs import one_error_line, point, run_file

EAT_LATER_THEN_RUN = """
import os, sys, threading, time
from pathlib import Path
from loadgen.cli import main

first = Path(sys.argv[sys.argv.index("--results") + 1]) / "requests_conc_2.jsonl"

def leak() -> None:
    while not (first.exists() and first.read_bytes().count(b"\\n") >= 1):
        time.sleep(0.01)
    held = []
    try:
        while True:
            held.append(os.open(os.devnull, os.O_RDONLY))
    except OSError:
        pass
    time.sleep(3600)

threading.Thread(target=leak, daemon=True).start()
sys.exit(main(sys.argv[1:]))
"""


def test_descriptors_running_out_mid_point_are_the_documented_stop(tmp_path: Path) -> None:
    results = tmp_path / "r"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            EAT_LATER_THEN_RUN,
            "--sim",
            "--conc",
            "2,4",
            "--isl",
            "48",
            "--osl",
            "60",
            "--encoder",
            "raw",
            "--prompts-per-conc",
            "6",
            "--warmup-per-conc",
            "0",
            "--no-progress",
            "--results",
            str(results),
            "--sim-args",
            "--step-fixed-ms 3",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_NOFILE, (400, 400)),
    )
    assert done.returncode == 1, done.stderr
    line = one_error_line(done.stderr)  # and no traceback
    assert "ran out of file descriptors" in line and "Too many open files" in line
    assert "conc_2.json is kept marked complete: false" in line
    assert f"continue with --resume {results}" in line
    result = point(results, 2)
    assert result["complete"] is False
    assert result["stop_reason"] == "out_of_file_descriptors"
    assert result["num_prompts"] >= 1
    assert run_file(results)["stop_reason"] == "out_of_file_descriptors"
    assert not (results / "conc_4.json").exists()
