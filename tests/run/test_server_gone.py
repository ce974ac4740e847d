"""A server that dies or freezes mid-sweep stops the sweep, keeps what was measured,
and can be resumed (docs/failure-behaviour.md, "Run-level failures").

Real processes throughout: `loadgen sim` killed with SIGKILL or frozen with SIGSTOP
while the `loadgen` CLI measures it, then restarted on the same port for `--resume`.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from pathlib import Path

from loadgen.run.server_watch import GONE_AFTER_S, STOPPED_FOR_S
from tests.support.procs import (
    SMALL,
    free_port,
    lines_in,
    loadgen,
    one_error_line,
    point,
    run_file,
    run_loadgen,
    start_sim,
    stop,
    wait_until,
    whole_lines,
)

CONC = ["--conc", "2,4,8", "--prompts-per-conc", "12", "--warmup-per-conc", "1"]


def _sweep_args(port: int, results: Path, *extra: str) -> list[str]:
    return [
        "--base-url",
        f"http://127.0.0.1:{port}",
        *CONC,
        *SMALL,
        "--results",
        str(results),
        *extra,
    ]


HANG_S = 60  # a hang guard, not a measurement


def seconds_in(line: str, before: str) -> float:
    """The `N.N s` that follows `before` in loadgen's line."""
    found = re.search(re.escape(before) + r" (\d+\.\d) s", line)
    assert found, f"no {before!r} N.N s in: {line}"
    return float(found[1])


def _wait_for_conc_4(results: Path, run: subprocess.Popen[str]) -> None:
    """Until conc 4 has measured a few requests (so requests are in flight right now)."""
    jsonl = results / "requests_conc_4.jsonl"

    def measuring() -> bool:
        assert run.poll() is None, run.communicate()
        return lines_in(jsonl) >= 6

    wait_until(measuring, 120, "conc 4 to measure 6 requests")


def test_killed_server_stops_the_sweep_and_resume_finishes_it(tmp_path: Path) -> None:
    port, results = free_port(), tmp_path / "results"
    sim = start_sim(port, tmp_path / "sim.log")
    try:
        run = loadgen(_sweep_args(port, results))
        _wait_for_conc_4(results, run)
        sim.send_signal(signal.SIGKILL)
        # a hang guard: ~1 s of probing, plus writing the files
        _, stderr = run.communicate(timeout=HANG_S)
    finally:
        stop(sim)
    assert run.returncode == 1, stderr
    line = one_error_line(stderr)
    assert (
        "the server stopped answering" in line
        and "conc_4.json is kept marked complete: false" in line
        and f"--resume {results}" in line
    )
    assert seconds_in(line, "answered no probe for") >= GONE_AFTER_S  # its own clock
    stopped = point(results, 4)
    assert stopped["complete"] is False and stopped["stop_reason"] == "server_gone"
    assert "stopped answering" in stopped["stop_detail"]
    # every request it sent is on disk, whole; the dead server's refusals are few: new
    # requests were held back once it was suspected
    records = whole_lines(results / "requests_conc_4.jsonl")
    assert records == stopped["num_prompts"] < 4 * 12
    assert stopped["errors_by_kind"]["connect"] <= 8 + 4
    assert not (results / "conc_8.json").exists()  # no later point ran
    assert not (results / "requests_conc_8.jsonl").exists()
    assert point(results, 2)["complete"] is True
    run_json = run_file(results)
    assert run_json["stop_reason"] == "server_gone" and run_json["finished_unix"] is not None
    assert [(p["conc"], p["complete"]) for p in run_json["points"]] == [(2, True), (4, False)]
    assert (results / "sweep.csv").read_text().splitlines()[1].startswith("2,")
    assert len((results / "sweep.csv").read_text().splitlines()) == 2  # complete points only
    conc_2 = (results / "conc_2.json").read_bytes()

    # Same flags but one: refused, nothing touched.
    sim = start_sim(port, tmp_path / "sim.log")
    try:
        other = run_loadgen(
            [*_sweep_args(port, results)[:-2], "--resume", str(results), "--osl", "64"]
        )
        assert other.returncode == 2 and "osl 64 (was 120)" in one_error_line(other.stderr)
        assert point(results, 4)["complete"] is False
        resumed = run_loadgen([*_sweep_args(port, results)[:-2], "--resume", str(results)])
    finally:
        stop(sim)
    assert resumed.returncode == 0, resumed.stderr
    assert (results / "conc_2.json").read_bytes() == conc_2  # complete points untouched
    for conc in (4, 8):
        assert point(results, conc)["complete"] is True
        assert whole_lines(results / f"requests_conc_{conc}.jsonl") == conc * 12
    first_id = run_json["run_id"]
    aside = results / "incomplete" / first_id
    assert whole_lines(aside / "requests_conc_4.jsonl") == records  # measured: kept
    assert point(aside, 4)["complete"] is False
    final = run_file(results)
    assert final["stop_reason"] is None
    assert [(p["conc"], p["complete"]) for p in final["points"]] == [
        (2, True),
        (4, True),
        (8, True),
    ]
    assert [a["stop_reason"] for a in final["attempts"]] == ["server_gone", None]
    assert [a["points"] for a in final["attempts"]] == [[2, 4], [4, 8]]
    assert final["points"][0]["run_id"] == first_id != final["run_id"]
    assert [row.split(",")[0] for row in (results / "sweep.csv").read_text().splitlines()[1:]] == [
        "2",
        "4",
        "8",
    ]
    again = run_loadgen([*_sweep_args(port, results)[:-2], "--resume", str(results)])
    assert again.returncode == 0 and "nothing to resume" in again.stderr


def test_server_pid_that_exits_stops_the_sweep(tmp_path: Path) -> None:
    """With --server-pid the exit is seen from the process table, even while the killed
    server is still a zombie (its parent, this test, has not reaped it)."""
    port, results = free_port(), tmp_path / "results"
    sim = start_sim(port, tmp_path / "sim.log")
    try:
        run = loadgen(_sweep_args(port, results, "--server-pid", str(sim.pid)))
        _wait_for_conc_4(results, run)
        os.kill(sim.pid, signal.SIGKILL)  # not reaped: a zombie until stop() below
        _, stderr = run.communicate(timeout=120)
    finally:
        stop(sim)
    assert run.returncode == 1, stderr
    assert f"the server process {sim.pid} (--server-pid) has exited" in one_error_line(stderr)
    assert point(results, 4)["stop_reason"] == "server_gone"
    assert not (results / "conc_8.json").exists()


def test_frozen_server_with_server_pid_stops_the_sweep(tmp_path: Path) -> None:
    """SIGSTOP: the kernel still accepts connections, nothing answers, nothing fails:
    only the process state shows it. The requests in flight are recorded as cancelled."""
    port, results = free_port(), tmp_path / "results"
    sim = start_sim(port, tmp_path / "sim.log")
    try:
        run = loadgen(_sweep_args(port, results, "--server-pid", str(sim.pid)))
        _wait_for_conc_4(results, run)
        sim.send_signal(signal.SIGSTOP)
        _, stderr = run.communicate(timeout=HANG_S)  # a hang guard
    finally:
        sim.send_signal(signal.SIGCONT)
        stop(sim)
    assert run.returncode == 1, stderr
    line = one_error_line(stderr)
    assert f"the server process {sim.pid} (--server-pid) has been stopped" in line
    # not called gone before it had been stopped for the window, by loadgen's own clock
    assert seconds_in(line, "(SIGSTOP or a debugger) for") >= STOPPED_FOR_S
    stopped = point(results, 4)
    assert stopped["complete"] is False and stopped["stop_reason"] == "server_gone"
    assert stopped["cancelled"] >= 1  # in flight when it froze (no failure: its own count)
    assert whole_lines(results / "requests_conc_4.jsonl") == stopped["num_prompts"]
    assert not (results / "conc_8.json").exists()


def test_a_short_freeze_is_not_a_dead_server(tmp_path: Path) -> None:
    """Guard against false alarms: frozen for 1.5 s (longer than the 1 s probe window)
    and thawed, the server fails no connection, so the sweep goes on and completes."""
    port, results = free_port(), tmp_path / "results"
    sim = start_sim(port, tmp_path / "sim.log")
    try:
        run = loadgen(_sweep_args(port, results))
        _wait_for_conc_4(results, run)
        sim.send_signal(signal.SIGSTOP)
        time.sleep(1.5)
        sim.send_signal(signal.SIGCONT)
        _, stderr = run.communicate(timeout=180)
    finally:
        stop(sim)
    assert run.returncode == 0, stderr
    for conc in (2, 4, 8):
        result = point(results, conc)
        assert result["complete"] is True and result["failed"] == 0
        assert result["stop_reason"] is None


def test_killed_server_stops_a_workers_sweep(tmp_path: Path) -> None:
    """--workers 2: the parent feeds the server watch with every record it receives, so
    a dead server stops the sweep there too, the point kept with `server_gone`."""
    port, results = free_port(), tmp_path / "results"
    sim = start_sim(port, tmp_path / "sim.log")
    try:
        run = loadgen(_sweep_args(port, results, "--workers", "2"))
        _wait_for_conc_4(results, run)
        sim.send_signal(signal.SIGKILL)
        _, stderr = run.communicate(timeout=120)
    finally:
        stop(sim)
    assert run.returncode == 1, stderr
    line = one_error_line(stderr)
    assert "the server stopped answering" in line and f"--resume {results}" in line
    stopped = point(results, 4)
    assert stopped["complete"] is False and stopped["stop_reason"] == "server_gone"
    assert stopped["incomplete_reason"] == stopped["stop_detail"]
    assert "stopped answering" in stopped["stop_detail"]
    assert whole_lines(results / "requests_conc_4.jsonl") == stopped["num_prompts"]
    assert not (results / "conc_8.json").exists()  # no later point ran
    assert point(results, 2)["complete"] is True
    assert run_file(results)["stop_reason"] == "server_gone"
