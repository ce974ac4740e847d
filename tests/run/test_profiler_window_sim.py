"""--profile-conc against the real simulator over real sockets (`loadgen sim
--profiler-dir`, vLLM 0.32's /start_profile and /stop_profile): one window, around the
chosen point's measured phase only (the simulator's trace names every request of every
step it profiled); the point says profiled: true and where the trace went; compare and
the report flag it; a server without a profiler stops the run before its first point;
a failed stop is on the point (docs/results.md `profiled`; docs/failure-behaviour.md)."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import orjson
import pytest

from loadgen.config.spec import SpecError
from loadgen.config.sweepfile import parse_sweep
from tests.support.procs import free_port, one_error_line, point, run_loadgen, start_sim, stop

# conc 1 then 2, a warmup request per slot, 2 measured requests per slot
SWEEP = [
    "--conc",
    "1,2",
    "--prompts-per-conc",
    "2",
    "--warmup-per-conc",
    "1",
    "--isl",
    "32",
    "--osl",
    "8",
    "--encoder",
    "raw",
    "--no-progress",
]
PROFILED = "profiled: a profiled server is slower"


def _run_id(results: Path) -> str:
    run_id: str = orjson.loads((results / "run.json").read_bytes())["run_id"]
    return run_id


@pytest.mark.parametrize("processes", [[], ["--workers", "2"]], ids=["in-process", "workers"])
def test_one_window_around_the_chosen_points_measured_phase(
    processes: list[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("VLLM_SERVER_DEV_MODE", "1")  # /server_info: the trace directory
    traces, results = tmp_path / "traces", tmp_path / "results"
    port = free_port()
    sim = start_sim(port, tmp_path / "sim.log", "--profiler-dir", str(traces))
    try:
        done = run_loadgen(
            [
                "--base-url",
                f"http://127.0.0.1:{port}",
                *SWEEP,
                *processes,
                "--profile-conc",
                "2",
                "--results",
                str(results),
            ]
        )
    finally:
        stop(sim)
    assert done.returncode == 0, done.stderr
    run_id = _run_id(results)
    prefix = f"loadgen-{run_id}-c2"
    files = list(traces.iterdir())
    assert len(files) == 1, files  # exactly one window
    assert re.fullmatch(re.escape(prefix) + r"_sim_engine\.\d+\.trace\.json", files[0].name)
    steps = orjson.loads(files[0].read_bytes())["steps"]
    in_window = {r for step in steps for r in step["requests"]}
    # Every step of the window ran conc 2's measured requests only (no warmup request,
    # nothing of conc 1), and every measured request of conc 2 ran inside it.
    measured = {f"{run_id}-c2-{i}" for i in range(4)}
    assert in_window == measured, (in_window, measured)
    assert all(step["requests"] for step in steps)

    profiled, plain = point(results, 2), point(results, 1)
    assert profiled["profiled"] is True and profiled["profile_error"] is None
    assert profiled["profile_prefix"] == prefix
    assert profiled["profile_trace"] == f"{prefix}_* in {traces}"
    assert plain["profiled"] is False and plain["profile_prefix"] is None
    assert profiled["complete"] is True and profiled["completed"] == 4
    # the note, before the first point and once the trace is written
    assert f"the server writes its trace files in {traces}" in done.stderr, done.stderr
    assert f"the server wrote its trace files {prefix}_* in {traces}" in done.stderr

    shown = run_loadgen(["compare", str(results)])
    assert shown.returncode == 0, shown.stderr
    flagged = [line for line in shown.stdout.splitlines() if PROFILED in line]
    assert len(flagged) == 1 and "conc 2: profiled" in flagged[0], shown.stdout
    report = tmp_path / "report.html"
    made = run_loadgen(["report", str(results), "-o", str(report)])
    assert made.returncode == 0, made.stderr
    assert report.read_text().count(PROFILED) == 1


def test_a_server_without_a_profiler_stops_the_run_before_its_first_point(
    tmp_path: Path,
) -> None:
    port = free_port()
    sim = start_sim(port, tmp_path / "sim.log")
    results = tmp_path / "results"
    try:
        done = run_loadgen(
            [
                "--base-url",
                f"http://127.0.0.1:{port}",
                *SWEEP,
                "--profile-conc",
                "2",
                "--results",
                str(results),
            ]
        )
    finally:
        stop(sim)
    assert done.returncode == 2, done.stderr
    line = one_error_line(done.stderr)
    assert "404 to /stop_profile" in line and "--profiler-config" in line, line
    assert not list(results.glob("conc_*")) and not (results / "run.json").exists()


def test_a_failed_stop_is_on_the_point_and_the_run_goes_on(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")  # the simulator cannot write its trace below a file
    port = free_port()
    sim = start_sim(port, tmp_path / "sim.log", "--profiler-dir", str(blocker / "traces"))
    results = tmp_path / "results"
    try:
        done = run_loadgen(
            [
                "--base-url",
                f"http://127.0.0.1:{port}",
                *SWEEP,
                "--profile-conc",
                "1",
                "--results",
                str(results),
            ]
        )
    finally:
        stop(sim)
    assert done.returncode == 0, done.stderr
    first = point(results, 1)
    assert first["profiled"] is True and first["complete"] is True
    error = first["profile_error"]
    assert error.startswith("stop: POST /stop_profile answered HTTP 500"), error
    assert "profiler window stop: POST /stop_profile answered HTTP 500" in done.stderr
    # without dev mode the server does not say where: the note names its config
    assert "where the server's --profiler-config says" in first["profile_trace"]
    assert point(results, 2)["profiled"] is False
    shown = run_loadgen(["compare", str(results)])
    assert "the profiler window failed: stop: POST /stop_profile" in shown.stdout, shown.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--conc", "1,2", "--profile-conc", "4"], "--profile-conc 4: not one of this run's"),
        (["--conc", "2", "--profile-conc", "0"], "--profile-conc 0: a concurrency point >= 1"),
        (["--conc", "2", "--profile-conc", "2", "--profile-conc", "2"], "given twice"),
    ],
)
def test_profile_conc_names_a_point_of_the_run(args: list[str], message: str) -> None:
    done = run_loadgen(["--base-url", "http://127.0.0.1:9", "--isl", "8", "--osl", "8", *args])
    assert done.returncode == 2, done.stderr
    assert message in one_error_line(done.stderr)


def test_profile_conc_is_a_lane_key(tmp_path: Path) -> None:
    document = {
        "results": str(tmp_path / "tree"),
        "conc": "1,2",
        "workload": {"isl": 8, "osl": 8},
        "lanes": [
            {"name": "profiled", "target": {"base-url": "http://127.0.0.1:9", "profile-conc": 2}},
            {"name": "plain", "target": {"base-url": "http://127.0.0.1:9"}},
        ],
    }
    plan = parse_sweep(document, source="sweep.yaml")
    assert [lane.spec.target.profile_conc for lane in plan.lanes] == [(2,), ()]
    document["lanes"][0]["target"]["profile-conc"] = [1, 8]  # type: ignore[index]
    with pytest.raises(SpecError, match="--profile-conc 8: not one of this run's"):
        parse_sweep(document, source="sweep.yaml")


def test_an_interrupted_point_still_closes_its_window(tmp_path: Path) -> None:
    """Ctrl-C during the profiled point's measured phase: the stop is still sent (the
    trace is written), and the point kept, incomplete, says it was profiled."""
    traces, results = tmp_path / "traces", tmp_path / "results"
    port = free_port()
    sim = start_sim(port, tmp_path / "sim.log", "--profiler-dir", str(traces))
    try:
        run = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "loadgen",
                "--base-url",
                f"http://127.0.0.1:{port}",
                "--conc",
                "2",
                "--prompts-per-conc",
                "1",
                "--warmup-per-conc",
                "0",
                "--isl",
                "32",
                "--osl",
                "4000",  # 4000 steps of 3 ms: the point is still measuring when stopped
                "--encoder",
                "raw",
                "--no-progress",
                "--profile-conc",
                "2",
                "--results",
                str(results),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        deadline = time.monotonic() + 120
        jsonl = results / "requests_conc_2.jsonl"
        while not jsonl.exists() and time.monotonic() < deadline:  # conc 2 has begun
            time.sleep(0.1)
        time.sleep(2)  # no warmup: its measured requests are streaming
        run.send_signal(signal.SIGINT)
        _, err = run.communicate(timeout=120)
    finally:
        stop(sim)
    assert run.returncode == 130, err
    files = list(traces.iterdir())
    assert len(files) == 1 and files[0].name.startswith(point(results, 2)["profile_prefix"])
    stopped = point(results, 2)
    assert stopped["profiled"] is True and stopped["complete"] is False, stopped
    assert stopped["profile_error"] is None
