"""`--trials N` end to end: the real CLI against a real `loadgen sim` over real sockets.

One small 3-trial run checks the plumbing (files, seeds, the pooled point and its
spread, the table's ±); a run stopped by SIGINT during trial 2 and continued with
`--resume` keeps trial 1 byte for byte and measures from trial 2 on.
"""

from __future__ import annotations

import math
import signal
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.compare.distributions import load_distributions
from loadgen.compare.inputs import load_runs
from loadgen.metrics.spread import spread
from loadgen.results.jsonl import read_jsonl
from loadgen.run.trials import trial_seed
from tests.support.procs import (
    free_port,
    lines_in,
    loadgen,
    point,
    run_file,
    run_loadgen,
    simulator,
    start_sim,
    stop,
    wait_until,
)

TINY = [
    "--isl",
    "64",
    "--osl",
    "16",
    "--prompts-per-conc",
    "4",
    "--encoder",
    "raw",
    "--no-progress",
]


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with simulator(tmp_path_factory.mktemp("sim") / "sim.log") as url:
        yield url


def trial(results: Path, conc: int, k: int) -> dict[str, Any]:
    data: dict[str, Any] = orjson.loads((results / f"conc_{conc}_trial_{k}.json").read_bytes())
    return data


def test_three_trials_write_each_trial_and_the_pooled_point(sim_url: str, tmp_path: Path) -> None:
    results = tmp_path / "r"
    done = run_loadgen(
        [
            "--base-url",
            sim_url,
            "--conc",
            "2,4",
            *TINY,
            "--trials",
            "3",
            "--seed",
            "7",
            "--results",
            str(results),
        ]
    )
    assert done.returncode == 0, done.stderr
    assert not (results / "requests_conc_4.jsonl").exists()  # the trials' files hold them
    pooled = point(results, 4)
    trials = [trial(results, 4, k) for k in (1, 2, 3)]
    records = [read_jsonl(results / f"requests_conc_4_trial_{k}.jsonl") for k in (1, 2, 3)]
    assert all(len(r) == 16 for r in records) and pooled["num_prompts"] == 48
    assert pooled["trials"] == 3 and pooled["trial_files"] == [
        f"conc_4_trial_{k}.json" for k in (1, 2, 3)
    ]
    seeds = pooled["trial_seeds"]
    assert seeds[0] == 7 and len(set(seeds)) == 3  # trial 1 is --seed's own point
    assert seeds == [trial_seed(7, k) for k in (1, 2, 3)]  # recorded, reproducible
    assert all("trial_seeds" not in t for t in trials)  # a trial's own file is a plain point
    # the pooled rate is the trials' tokens over their summed measured time
    assert pooled["duration"] == pytest.approx(sum(t["duration"] for t in trials), rel=1e-9)
    assert pooled["total_output_tokens"] == sum(t["total_output_tokens"] for t in trials)
    assert pooled["output_throughput"] == pytest.approx(
        pooled["total_output_tokens"] / pooled["duration"]
    )
    # the spread is each trial file's own value, with the Student-t interval
    for figure in ("output_throughput", "p99_ttft_ms", "median_tpot_ms", "acceptance_length"):
        entry = pooled["trial_spread"][figure]
        values = [t[figure] for t in trials]
        assert entry["values"] == values
        expected = spread(values)
        assert entry["mean"] == pytest.approx(expected.mean)
        assert expected.ci_low is not None and expected.ci_high is not None
        assert entry["ci_low"] == pytest.approx(expected.ci_low)
        assert entry["ci_half_width"] == pytest.approx(expected.ci_high - expected.mean)
        assert entry["wide"] is True and entry["n"] == 3
        assert entry["ci_low"] <= entry["mean"] <= entry["ci_high"]
    # the pooled p99 is over every request of every trial
    ttfts = sorted((r.chunk_ns[0] - r.start_ns) / 1e6 for rs in records for r in rs)
    assert min(ttfts) <= pooled["p99_ttft_ms"] <= max(ttfts)
    assert math.isclose(pooled["median_ttft_ms"], _median(ttfts), rel_tol=1e-9)
    # the console table shows the trials' mean ± its CI half-width
    entry = pooled["trial_spread"]["output_throughput"]
    assert f"{entry['mean']:,.1f} ±{entry['ci_half_width']:,.1f}" in done.stdout
    assert "the pooled figures (all trials' requests) are in" in done.stdout
    # the report's distributions pool the trials' record files, as the point does
    [run] = load_runs([results])
    assert set(load_distributions(run)) == {2, 4}
    entry = run_file(results)["points"][1]
    assert [t["seed"] for t in entry["trials"]] == seeds
    assert all(t["server_before"] is not None for t in entry["trials"])


def _median(values: list[float]) -> float:
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


def test_resume_continues_at_the_first_missing_trial(sim_url: str, tmp_path: Path) -> None:
    results = tmp_path / "r"
    args = [
        "--base-url",
        sim_url,
        "--conc",
        "2",
        "--isl",
        "64",
        "--osl",
        "100",
        "--prompts-per-conc",
        "20",
        "--encoder",
        "raw",
        "--no-progress",
        "--warmup-per-conc",
        "0",
        "--trials",
        "3",
    ]
    process = loadgen([*args, "--results", str(results)])
    try:
        second = results / "requests_conc_2_trial_2.jsonl"
        wait_until(lambda: lines_in(second) >= 2, 120, "trial 2's first records")
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, stderr
    first = (results / "conc_2_trial_1.json").read_bytes()
    first_records = (results / "requests_conc_2_trial_1.jsonl").read_bytes()
    assert orjson.loads(first)["complete"] is True
    assert trial(results, 2, 2)["complete"] is False
    assert not (results / "conc_2.json").exists()  # no pooled point of a stopped trial
    resumed = run_loadgen([*args, "--resume", str(results)])
    assert resumed.returncode == 0, resumed.stderr
    # trial 1 kept as it was; the stopped trial 2 set aside, then measured again
    assert (results / "conc_2_trial_1.json").read_bytes() == first
    assert (results / "requests_conc_2_trial_1.jsonl").read_bytes() == first_records
    aside = list((results / "incomplete").glob("*/conc_2_trial_2.json"))
    assert len(aside) == 1 and orjson.loads(aside[0].read_bytes())["complete"] is False
    pooled = point(results, 2)
    assert pooled["complete"] is True and pooled["trials"] == 3
    assert pooled["num_prompts"] == 3 * 40
    assert [trial(results, 2, k)["complete"] for k in (1, 2, 3)] == [True] * 3
    # trial 1's counters were the earlier attempt's: the pooled server figures are unknown
    assert pooled["server_acceptance_length"] is None
    assert pooled["trial_spread"]["output_throughput"]["n"] == 3


def test_trials_on_workers_pool_every_process_of_every_trial(tmp_path: Path) -> None:
    results, trace = tmp_path / "r", tmp_path / "trace.jsonl"
    port = free_port()
    sim = start_sim(port, tmp_path / "sim.log", "--trace", str(trace))
    try:
        done = run_loadgen(
            [
                "--base-url",
                f"http://127.0.0.1:{port}",
                "--conc",
                "4",
                *TINY,
                "--trials",
                "2",
                "--workers",
                "2",
                "--results",
                str(results),
            ]
        )
    finally:
        stop(sim)
    assert done.returncode == 0, done.stderr
    # every request the workers sent names its trial: ids unique over the whole run
    ids = [orjson.loads(line)["x_request_id"] for line in trace.read_bytes().splitlines()]
    sent = [i for i in ids if "-c4-" in i]
    assert len(sent) == len(set(sent)) == 2 * (16 + 8)  # measured + warmup, per trial
    assert {i.split("-c4-")[1].split("-")[0] for i in sent} == {"t1", "t2"}
    pooled = point(results, 4)
    assert pooled["trials"] == 2 and pooled["num_prompts"] == 32
    assert [len(read_jsonl(results / f"requests_conc_4_trial_{k}.jsonl")) for k in (1, 2)] == [
        16,
        16,
    ]
    labels = [p["process"] for p in pooled["client_processes"]]
    assert sum(label.startswith("trial 2: ") for label in labels) == 3  # parent + 2 workers
    assert pooled["trial_spread"]["output_throughput"]["values"] == [
        trial(results, 4, k)["output_throughput"] for k in (1, 2)
    ]
