"""`--find-max` stopped by a real SIGINT (or SIGKILL) to a real `python -m loadgen`, then
`--resume`: the probes measured before the stop are read back from their directories
(their files untouched), the probe the stop cut short is measured again, and the search
ends with the answer a search never stopped finds (the simulator's batch is capped at 4
sequences, so TTFT p99 jumps past 100 ms above conc 4: tests/orchestrate/test_find_max_sim.py).
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support.procs import free_port, run_loadgen, start_sim
from tests.support.procs import stop as stop_sim

# an external simulator: a SIGKILLed loadgen cannot stop an embedded one (its own session)
SEARCH = [
    "--conc",
    "1..8:+1",
    "--isl",
    "64",
    "--osl",
    "32",
    "--prompts-per-conc",
    "12",
    "--warmup-per-conc",
    "1",
    "--encoder",
    "raw",
    "--no-progress",
    "--find-max",
    "conc",
    "--slo",
    "ttft:p99=100ms",
]


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    port = free_port()
    log = tmp_path_factory.mktemp("sim") / "sim.log"
    sim = start_sim(port, log, "--max-num-seqs", "4", "--step-fixed-ms", "10")
    try:
        yield ["--base-url", f"http://127.0.0.1:{port}"]
    finally:
        stop_sim(sim)


def probes(results: Path) -> list[dict[str, object]]:
    try:
        found = orjson.loads((results / "capacity.json").read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return []
    return list(found["probes"])


@pytest.mark.parametrize("stop", [signal.SIGINT, signal.SIGKILL])
def test_a_stopped_search_resumes_reading_its_probes_back(
    tmp_path: Path, target: list[str], stop: signal.Signals
) -> None:
    """SIGINT: Ctrl-C, the CLI stops cleanly; SIGKILL: a killed process, nothing flushed."""
    results = tmp_path / "search"
    process = subprocess.Popen(
        [sys.executable, "-m", "loadgen", *target, *SEARCH, "--results", str(results)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and len(probes(results)) < 2:
            time.sleep(0.05)
        assert len(probes(results)) >= 2, "two probes not measured within 120 s"
        process.send_signal(stop)
        _, err = process.communicate(timeout=60)
    finally:
        process.kill()
    assert process.returncode == (130 if stop == signal.SIGINT else -signal.SIGKILL), err
    before = probes(results)
    assert 2 <= len(before) < 4, err  # stopped mid-search
    kept = {
        str(p["results"]): (results / str(p["results"]) / f"conc_{p['load']:g}.json").read_bytes()
        for p in before
    }
    stopped = orjson.loads((results / "capacity.json").read_bytes())
    assert stopped["finished"] is False  # written after each probe, and at the start

    resumed = run_loadgen([*target, *SEARCH, "--resume", str(results)])
    assert resumed.returncode == 0, resumed.stderr
    for name in kept:
        assert f"loadgen: find-max: {name} read back (measured before)" in resumed.stderr
    found = orjson.loads((results / "capacity.json").read_bytes())
    assert found["finished"] is True and found["answer"] == 4
    assert found["first_fail"]["load"] == 5
    assert [p["load"] for p in found["probes"]][: len(before)] == [p["load"] for p in before]
    for name, data in kept.items():  # read back, not measured again
        load = name.rsplit("_", 1)[1]
        assert (results / name / f"conc_{load}.json").read_bytes() == data
    for probe in found["probes"]:  # every probe's directory holds its complete point
        point = orjson.loads(
            (results / str(probe["results"]) / f"conc_{probe['load']:g}.json").read_bytes()
        )
        assert point["complete"] is True


def test_resume_of_a_directory_without_a_search_says_so(tmp_path: Path, target: list[str]) -> None:
    (tmp_path / "empty").mkdir()
    done = run_loadgen([*target, *SEARCH, "--resume", str(tmp_path / "empty")])
    assert done.returncode == 2
    assert "no capacity.json there, so no capacity search to continue" in done.stderr
