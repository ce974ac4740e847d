"""The embedded simulator's lateness reaches the results, by point: a real `python -m
loadgen --sim` whose simulator is stopped (SIGSTOP) for 400 ms, three times, in the middle
of conc 2's measured phase. Its point records the warnings and the worst lateness; `compare` and
`report` list them under that point; a `--base-url` run records null (loadgen did not
start that server, so it cannot know)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.support.procs import SMALL, point, run_loadgen, simulator


def simulator_child(parent: int) -> int:
    for task in Path(f"/proc/{parent}/task").iterdir():
        for child in (task / "children").read_text().split():
            if b"sim" in Path(f"/proc/{child}/cmdline").read_bytes().split(b"\0"):
                return int(child)
    raise AssertionError("no simulator child process")


def starved_run(results: Path) -> None:
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadgen",
            "--sim",
            "--conc",
            "1,2",
            *SMALL,
            "--prompts-per-conc",
            "30",
            "--warmup-per-conc",
            "0",
            "--results",
            str(results),
            "--sim-args",
            "--step-fixed-ms 3",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        stdin=subprocess.DEVNULL,
    )
    try:
        jsonl = results / "requests_conc_2.jsonl"
        deadline = time.monotonic() + 120
        while not jsonl.exists() or jsonl.read_bytes().count(b"\n") < 1:
            assert time.monotonic() < deadline and process.poll() is None, "no conc 2"
            time.sleep(0.01)
        sim = simulator_child(process.pid)
        # Three stops, not one: a stop that lands while the simulator is idle (both of
        # conc 2's streams finished in the same step, the next pair not yet sent) makes
        # it late for nothing, and the first line of the file is written at just such a
        # moment. Only the first late step is logged (one warning per 5 s).
        for _ in range(3):
            assert jsonl.read_bytes().count(b"\n") < 30, "conc 2 ended before the stop"
            os.kill(sim, signal.SIGSTOP)
            try:
                time.sleep(0.4)
            finally:
                os.kill(sim, signal.SIGCONT)
            time.sleep(0.1)
        _, stderr = process.communicate(timeout=120)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, stderr
    assert "the simulator fell behind its step schedule" in stderr  # the run's own line


def test_the_simulators_lateness_is_in_the_point_and_compare_and_report(tmp_path: Path) -> None:
    results = tmp_path / "starved"
    starved_run(results)
    starved = point(results, 2)
    assert starved["simulator_behind_warnings"] >= 1
    assert starved["simulator_behind_max_ms"] >= 300  # stopped 400 ms: at least that late
    assert isinstance(point(results, 1)["simulator_behind_warnings"], int)  # known: it ran it

    done = run_loadgen(["compare", str(results)], timeout=120)
    assert done.returncode == 0, done.stderr
    listed = [line for line in done.stdout.splitlines() if "fell behind" in line]
    # conc 2's line (a busy machine may starve conc 1's simulator as well)
    assert [
        f"  starved conc 2: the simulator fell behind its step schedule by up to "
        f"{starved['simulator_behind_max_ms']} ms "
        f"({starved['simulator_behind_warnings']} "
        f"warning{'' if starved['simulator_behind_warnings'] == 1 else 's'}) during the point: "
        "short of CPU, it sent late steps back to back, so ITL/TTFT describe an "
        "overloaded simulator, not the engine it models"
    ] == [line for line in listed if "conc 2" in line]
    report = tmp_path / "report.html"
    done = run_loadgen(["report", str(results), "-o", str(report)], timeout=120)
    assert done.returncode == 0, done.stderr
    assert "the simulator fell behind its step schedule by up to" in report.read_text()


def test_a_server_loadgen_did_not_start_has_unknown_lateness(tmp_path: Path) -> None:
    with simulator(tmp_path / "sim.log") as url:
        done = run_loadgen(
            [
                "--base-url",
                url,
                "--conc",
                "1",
                *SMALL,
                "--prompts-per-conc",
                "1",
                "--warmup-per-conc",
                "0",
                "--results",
                str(tmp_path / "r"),
            ]
        )
    assert done.returncode == 0, done.stderr
    result = point(tmp_path / "r", 1)
    assert result["simulator_behind_warnings"] is None
    assert result["simulator_behind_max_ms"] is None
