"""`--frontier north-star`: InferenceX AgentX's rule (MODELS.md, "North-star Pareto
policy", commit 843c6254ff69) over real simulator lanes, through the real CLI.

The rule's expected sets are recomputed here by brute force from the lanes' conc_<N>.json
files (a point is dominated when another is at least as good in both coordinates and
better in one), not by loadgen's sweep-and-keep frontier.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.metrics.compare import RunInput, compare
from loadgen.metrics.north_star import north_star
from loadgen.results.point import PointResult, point_from_json
from tests.support.fake_records import point_file

SIM = "--step-fixed-ms 1 --decode-token-us 200 --prefill-token-us 2 --seed 7"
SWEEP = f"""
conc: [1, 4, 16]
workload:
  isl: 64
  osl: 32
prompts-per-conc: 3
warmup-per-conc: 0
no-progress: true
lanes:
  - name: plain
    num-gpus: 1
    target: {{sim: true, sim-args: "--spec-tokens 0 {SIM}"}}
  - name: mtp
    num-gpus: 2
    target: {{sim: true, sim-args: "--spec-tokens 2 {SIM}"}}
  - name: unknown-gpus
    target: {{sim: true, sim-args: "--spec-tokens 0 {SIM}"}}
"""
CONCS = (1, 4, 16)


def loadgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
        stdin=subprocess.DEVNULL,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("star")
    (base / "sweep.yaml").write_text(SWEEP)
    done = loadgen("--config", str(base / "sweep.yaml"), "--results", str(base / "tree"))
    assert done.returncode == 0, done.stderr
    return base / "tree"


def brute_frontier(points: Sequence[tuple[Any, float, float]]) -> set[Any]:
    return {
        key
        for key, x, y in points
        if not any(
            (x2 >= x and y2 >= y) and (x2 > x or y2 > y) for key2, x2, y2 in points if key2 != key
        )
    }


def test_north_star_frontier_and_gate_follow_the_rule(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "compare.json"
    done = loadgen(
        "compare",
        str(tree / "plain"),
        str(tree / "mtp"),
        "--frontier",
        "north-star",
        "--json",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    assert "North-Star frontier" in done.stdout
    star = orjson.loads(out.read_bytes())["north_star"]
    points = {
        (lane, conc): orjson.loads((tree / lane / f"conc_{conc}.json").read_bytes())
        for lane in ("plain", "mtp")
        for conc in CONCS
    }
    assert star["throughput_field"] == "output_throughput_per_gpu"
    canonical = brute_frontier(
        [(k, p["p90_e2e_norm_intvty"], p["output_throughput_per_gpu"]) for k, p in points.items()]
    )
    view = brute_frontier(
        [
            (k, p["median_interactivity_tok_s_user"], p["output_throughput_per_gpu"])
            for k, p in points.items()
        ]
    )
    assert {(p["run"], p["conc"]) for p in star["canonical"]} == canonical
    assert {(p["run"], p["conc"]) for p in star["interactivity_gated"]} == view & canonical
    assert {(p["run"], p["conc"]) for p in star["interactivity_dropped"]} == view - canonical
    for entry in star["canonical"]:
        point = points[(entry["run"], entry["conc"])]
        assert entry["e2e_norm_intvty"] == point["p90_e2e_norm_intvty"]
        assert entry["throughput"] == point["output_throughput_per_gpu"]


def test_a_view_frontier_point_that_is_no_north_star_winner_is_left_off() -> None:
    # b@8 has the best conventional interactivity at its throughput but a poor E2E
    # normalized interactivity (a long TTFT amortized over the output): dominated by a@4
    # on the North-Star axes, so the gated interactivity frontier leaves it off.
    def result(e2e: float, intvty: float, tput: float) -> PointResult:
        fields = {
            "p90_e2e_norm_intvty": e2e,
            "median_interactivity_tok_s_user": intvty,
            "output_throughput_per_gpu": tput,
        }
        return point_from_json(point_file(fields), "test")

    comparison = compare(
        [
            RunInput("a", {1: result(50, 60, 100), 4: result(40, 45, 300)}),
            RunInput("b", {8: result(30, 55, 290), 2: result(35, 40, 150)}),
        ]
    )
    star = north_star(comparison)
    assert {(p.run, p.conc) for p in star.canonical} == {("a", 1), ("a", 4)}
    assert {(p.run, p.conc) for p in star.gated} == {("a", 1), ("a", 4)}
    assert {(p.run, p.conc) for p in star.dropped} == {("b", 8)}


def test_without_throughput_per_gpu_it_is_refused_in_one_line(tree: Path) -> None:
    done = loadgen(
        "compare", str(tree / "plain"), str(tree / "unknown-gpus"), "--frontier", "north-star"
    )
    assert done.returncode != 0 and "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "error" in line]
    assert len(errors) == 1 and "--num-gpus" in errors[0], done.stderr


def test_report_has_the_north_star_section(tree: Path, tmp_path: Path) -> None:
    out = tmp_path / "report.html"
    done = loadgen(
        "report",
        str(tree / "plain"),
        str(tree / "mtp"),
        "--frontier",
        "north-star",
        "-o",
        str(out),
    )
    assert done.returncode == 0, done.stderr
    html = out.read_text()
    assert 'id="north-star"' in html and "Throughput vs interactivity, gated" in html
    assert "E2E intvty p90" in html  # the comparison table's column
    plain = loadgen("report", str(tree / "plain"), "-o", str(tmp_path / "plain.html"))
    assert plain.returncode == 0 and 'id="north-star"' not in (tmp_path / "plain.html").read_text()
