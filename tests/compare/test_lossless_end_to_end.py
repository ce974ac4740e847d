"""The lossless check end to end, over real sockets: a sweep file of simulator lanes through
the real CLI (their outputs kept by default: one seed, one workload, greedy), then
`loadgen compare` on its lanes.

The baseline runs twice (`base` and `base.repeat`: the noise floor). `mtp` speculates
(K=2) and verifies: its outputs are the baseline's. `lossy` speculates with
--fault-lossy-spec 0.05 (a broken draft path): flagged, and --require-lossless exits 1.
`synthetic` accepts drafts without verifying them (vLLM's synthetic rejection sampling):
never called lossless, whatever its outputs."""

from __future__ import annotations

import csv
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.metrics.lossless import FLAGGED, UNVERIFIED
from loadgen.results.jsonl import read_jsonl

SIM = "--step-fixed-ms 1 --decode-token-us 20 --seed 7"
SYNTHETIC = (
    '{"method": "mtp", "num_speculative_tokens": 2, "rejection_sample_method": "synthetic", '
    '"synthetic_acceptance_length": 2.5}'
)
SWEEP = f"""
conc: [4]
workload: {{isl: 64, osl: 64}}
prompts-per-conc: 8
warmup-per-conc: 1
no-progress: true
require-lossless: true
lanes:
  - name: base
    target: {{sim: true, sim-args: "--spec-tokens 0 {SIM}"}}
  - name: base.repeat
    target: {{sim: true, sim-args: "--spec-tokens 0 {SIM}"}}
  - name: mtp
    target: {{sim: true, sim-args: "--spec-tokens 2 --fault-lossy-spec 0 {SIM}"}}
  - name: lossy
    target: {{sim: true, sim-args: "--spec-tokens 2 --fault-lossy-spec 0.05 {SIM}"}}
  - name: synthetic
    target:
      sim: true
      sim-args: [--speculative-config, '{SYNTHETIC}', --step-fixed-ms, "1", --seed, "7"]
"""


def loadgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, subprocess.CompletedProcess[str]]:
    base = tmp_path_factory.mktemp("lossless")
    (base / "sweep.yaml").write_text(SWEEP)
    done = loadgen("--config", str(base / "sweep.yaml"), "--results", str(base / "tree"))
    return base / "tree", done


def lanes(check: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {lane["run"]: lane for lane in check["lanes"]}


def test_the_sweep_files_own_comparison_flags_the_lossy_lane(
    run: tuple[Path, subprocess.CompletedProcess[str]],
) -> None:
    tree, done = run
    # every lane measured and written before --require-lossless fails the run, in one line
    assert done.returncode == 1, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if "--require-lossless" in x]
    assert "lossy at conc 4: " + FLAGGED in line and "synthetic at conc 4: " + UNVERIFIED in line
    assert "mtp" not in line and "Traceback" not in done.stderr
    for name in ("compare.json", "compare.csv", "report.html"):
        assert (tree / name).is_file()
    # the outputs were kept without --record-outputs: the lanes share seed and prompts
    records = read_jsonl(tree / "lossy" / "requests_conc_4.jsonl")
    assert len(records) == 32 and all(r.output is not None for r in records)

    check = orjson.loads((tree / "compare.json").read_bytes())["lossless"]
    by_run = lanes(check)
    assert check["repeat"] == "base.repeat" and set(by_run) == {"mtp", "lossy", "synthetic"}
    assert check["flagged"] == ["lossy conc 4"]
    floor = by_run["mtp"]["noise_floor"]
    assert floor == 1.0 and by_run["mtp"]["noise_floor_pairs"] == 32  # the sim is exact
    assert by_run["mtp"]["identical_share"] == 1.0
    assert by_run["mtp"]["lossless_verdict"] == "lossless"
    lossy = by_run["lossy"]
    assert lossy["lossless_verdict"] == "differs" and lossy["identical_share"] < 0.8
    assert lossy["identical_ci95_high"] < lossy["noise_floor_ci95_low"]
    assert 0 < lossy["first_divergence_median"] < 64 and lossy["divergence_unit"] == "token"
    assert by_run["synthetic"]["lossless_verdict"] == "unverified"

    # the same verdicts in the CSV, the console and the report
    with (tree / "compare.csv").open() as handle:
        rows = {row["run"]: row for row in csv.DictReader(handle)}
    assert (
        rows["lossy"]["lossless_note"] == FLAGGED and rows["mtp"]["lossless_verdict"] == "lossless"
    )
    assert rows["base"]["lossless_verdict"] == ""
    assert "lossy conc 4: identical to the baseline" in done.stdout and FLAGGED in done.stdout
    report = (tree / "report.html").read_text()
    assert f"<strong>{FLAGGED}</strong>" in report and f"<strong>{UNVERIFIED}</strong>" in report


def test_compare_requires_lossless_only_of_what_it_is_given(
    run: tuple[Path, subprocess.CompletedProcess[str]], tmp_path: Path
) -> None:
    tree, _ = run
    good = loadgen(
        "compare", str(tree / "base"), str(tree / "base.repeat"), str(tree / "mtp"),
        "--require-lossless",
    )  # fmt: skip
    assert good.returncode == 0, good.stderr
    assert "mtp conc 4: identical to the baseline 100.0% of 32" in good.stdout
    bad = loadgen(
        "compare", str(tree / "base"), str(tree / "lossy"), str(tree / "mtp"),
        "--repeat-baseline", str(tree / "mtp"), "--require-lossless",
        "--json", str(tmp_path / "c.json"),
    )  # fmt: skip
    assert bad.returncode == 1 and bad.stderr.count("\n") == 1, bad.stderr
    check = orjson.loads((tmp_path / "c.json").read_bytes())["lossless"]
    assert check["repeat"] == "mtp" and check["flagged"] == ["lossy conc 4"]
    # no repeat of the baseline: the share is shown, but nothing can be called lossless
    floorless = loadgen("compare", str(tree / "base"), str(tree / "mtp"), "--require-lossless")
    assert floorless.returncode == 1
    assert (
        "no noise floor" in floorless.stderr and "within run-to-run noise" not in floorless.stdout
    )
    unknown = loadgen("compare", str(tree / "base"), str(tree / "mtp"), "--repeat-baseline", "x")
    assert unknown.returncode == 2 and "--repeat-baseline x: not one of the runs" in unknown.stderr


@pytest.mark.parametrize(
    ("lane_b", "kept"),
    [
        ({}, True),  # one seed, one workload, greedy: comparable output for output
        ({"temperature": 0.7}, False),  # sampled: outputs differ by design
        ({"seed": 2}, False),  # other prompts
        ({"workload": {"osl": 32}}, False),
    ],
)
def test_a_sweep_file_keeps_outputs_where_its_lanes_can_be_compared(
    lane_b: dict[str, Any], kept: bool
) -> None:
    from loadgen.config.sweepfile import parse_sweep

    document = {
        "conc": "4",
        "workload": {"isl": 64, "osl": 16},
        "target": {"sim": True},
        "lanes": [{"name": "a"}, {"name": "b", **lane_b}],
    }
    plan = parse_sweep(document, source="s.yaml")
    assert [lane.spec.output.record_outputs for lane in plan.lanes] == [kept, kept]


FEW = f"""
conc: [1]
workload: {{isl: 64, osl: 32}}
prompts-per-conc: 3
warmup-per-conc: 1
no-progress: true
require-lossless: true
lanes:
  - name: base
    target: {{sim: true, sim-args: "--spec-tokens 0 {SIM}"}}
  - name: base.repeat
    target: {{sim: true, sim-args: "--spec-tokens 0 {SIM}"}}
  - name: lossy
    target: {{sim: true, sim-args: "--spec-tokens 2 --fault-lossy-spec 1 {SIM}"}}
"""


def test_three_pairs_are_too_few_to_call_a_lane_lossless(tmp_path: Path) -> None:
    """Every one of the lossy lane's outputs differs, but 0 of 3 and the floor's 3 of 3
    have overlapping intervals: no verdict, and --require-lossless says how many it needs."""
    (tmp_path / "sweep.yaml").write_text(FEW)
    done = loadgen("--config", str(tmp_path / "sweep.yaml"), "--results", str(tmp_path / "tree"))
    assert done.returncode == 1, done.stderr
    (line,) = [x for x in done.stderr.splitlines() if "--require-lossless" in x]
    assert "lossy at conc 1: too few pairs to judge (3 pairs" in line
    assert "within run-to-run noise;" in line and "5 needed" in line  # 0 of 5 clears 3 of 3
    check = orjson.loads((tmp_path / "tree" / "compare.json").read_bytes())["lossless"]
    (lossy,) = check["lanes"]
    assert (lossy["identical_share"], lossy["identical_pairs"]) == (0.0, 3)
    assert lossy["lossless_verdict"] == "too_few_pairs" and lossy["lossless_pairs_needed"] == 5
    assert lossy["identical_ci95_low"] == 0.0  # not 5.55e-17
    assert "within run-to-run noise" not in done.stdout.replace("would be within run-to-run", "")
