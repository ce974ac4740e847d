"""`--find-max conc` end to end: the real CLI against a real `loadgen sim` whose batch is
capped at 4 sequences, so TTFT p99 jumps from ~25 ms at conc 4 to ~170 ms at conc 5 (a
fifth request waits for a whole request to end). The search must find what a sweep of
every concurrency finds, with fewer points."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support.procs import free_port, point, run_loadgen, start_sim, stop

LIMIT_MS = 100.0
ARGS = [
    "--isl",
    "64",
    "--osl",
    "32",
    "--prompts-per-conc",
    "3",
    "--warmup-per-conc",
    "1",
    "--encoder",
    "raw",
    "--no-progress",
]


@pytest.fixture(scope="module")
def capped_sim(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_port()
    sim = start_sim(
        port,
        tmp_path_factory.mktemp("sim") / "sim.log",
        "--max-num-seqs",
        "4",
        "--step-fixed-ms",
        "10",
    )
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(sim)


def test_find_max_conc_equals_a_sweep_of_every_conc(capped_sim: str, tmp_path: Path) -> None:
    every = tmp_path / "every"
    swept = run_loadgen(
        ["--base-url", capped_sim, "--conc", "1..8:+1", *ARGS, "--results", str(every)]
    )
    assert swept.returncode == 0, swept.stderr
    p99 = {c: point(every, c)["p99_ttft_ms"] for c in range(1, 9)}
    brute = max(c for c, v in p99.items() if v <= LIMIT_MS)
    assert all(v <= LIMIT_MS for c, v in p99.items() if c <= brute)  # monotone here

    found = tmp_path / "found"
    searched = run_loadgen(
        [
            "--base-url",
            capped_sim,
            "--conc",
            "1..8:+1",
            *ARGS,
            "--find-max",
            "conc",
            "--slo",
            f"ttft:p99={LIMIT_MS:g}ms",
            "--results",
            str(found),
        ]
    )
    assert searched.returncode == 0, searched.stderr
    capacity = orjson.loads((found / "capacity.json").read_bytes())
    assert capacity["finished"] is True and capacity["answer"] == brute == 4
    assert capacity["binding_objective"] == "ttft:p99"
    assert capacity["last_pass"]["load"] == brute
    assert capacity["first_fail"]["load"] == brute + 1  # the bracket is one conc wide
    probes = capacity["probes"]
    assert len(probes) < 8 == capacity["brute_force_points"]
    for probe in probes:  # each probe's check is its own point file's figure
        conc = int(probe["load"])
        measured = point(found / probe["results"], conc)["p99_ttft_ms"]
        [check] = probe["checks"]
        assert check["value_ms"] == check["bound_ms"] == measured
        assert probe["passed"] is (measured <= LIMIT_MS)
    assert f"conc {brute} is the largest that meets every objective" in searched.stderr
    assert f"{len(probes)} probes (a sweep of every conc in 1..8 measures 8)" in searched.stderr
    again = run_loadgen(
        [
            "--base-url",
            capped_sim,
            "--conc",
            "1..8:+1",
            *ARGS,
            "--find-max",
            "conc",
            "--slo",
            "ttft:p99=100ms",
            "--results",
            str(found),
        ]
    )
    assert again.returncode == 2 and "already holds a capacity search" in again.stderr
