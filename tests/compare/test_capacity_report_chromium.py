"""End to end: a sweep file with a plain lane and a `find-max: conc` lane against the
embedded simulator (batch capped at 4 sequences, so TTFT p99 jumps past 100 ms above conc
4: tests/orchestrate/test_find_max_sim.py), through the real CLI; the search lane's directory holds
capacity.json, and `loadgen report` on the tree, opened in a real headless Chromium, shows
the search on the throughput-interactivity figure and its line of text. Every expected
number is read from capacity.json and the probes' own point files.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest

from loadgen.compare.capacity_inputs import probe_points, read_capacity
from loadgen.sinks.report_capacity import overlay
from tests.support.chromium_cdp import find_chromium, open_page
from tests.support.procs import run_loadgen

SIM = "--max-num-seqs 4 --step-fixed-ms 10"
SWEEP = f"""
conc: [1, 2, 3, 4, 5, 6, 7, 8]
workload:
  isl: 64
  osl: 32
prompts-per-conc: 3
warmup-per-conc: 1
encoder: raw
no-progress: true
lanes:
  - name: plain
    conc: [2, 6]
    target: {{sim: true, sim-args: "{SIM}"}}
  - name: search
    find-max: conc
    slo: {{"ttft:p99": 100ms}}
    target: {{sim: true, sim-args: "{SIM}"}}
"""
FRONTIER_JS = """(() => {
  const section = document.getElementById('s-frontier');
  return {
    images: [...section.querySelectorAll('img')].map(i => (
        {alt: i.alt, complete: i.complete, width: i.naturalWidth,
         shownWidth: i.getBoundingClientRect().width})),
    lines: [...section.querySelectorAll('p.capacity')].map(p => [p.dataset.run, p.textContent]),
  };
})()"""


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("capacity-sweep")
    (base / "sweep.yaml").write_text(SWEEP)
    done = run_loadgen(["--config", str(base / "sweep.yaml"), "--results", str(base / "tree")])
    assert done.returncode == 0, done.stderr
    assert "lane 2/2 search: find-max conc -> " in done.stderr
    assert "lane search: capacity search in" in done.stderr
    return base / "tree"


def capacity(tree: Path) -> dict[str, Any]:
    return dict(orjson.loads((tree / "search" / "capacity.json").read_bytes()))


def test_the_lane_runs_the_search_not_a_sweep_of_its_points(tree: Path) -> None:
    found = capacity(tree)
    assert found["finished"] is True and found["answer"] == 4
    assert found["binding_objective"] == "ttft:p99"
    assert len(found["probes"]) < found["brute_force_points"] == 8
    assert not list((tree / "search").glob("conc_*.json"))  # no sweep of the 8 points
    lanes = orjson.loads((tree / "lanes.json").read_bytes())["lanes"]
    assert [(lane["name"], lane["state"]) for lane in lanes] == [
        ("plain", "succeeded"),
        ("search", "succeeded"),
    ]


def test_the_figure_marks_every_probe_from_its_own_point(tree: Path) -> None:
    view = read_capacity(tree / "search")
    drawn = overlay("search", view.result, probe_points(view), "output_throughput")
    found = capacity(tree)
    assert [(m.load, m.passed) for m in drawn.marks] == [
        (p["load"], p["passed"]) for p in found["probes"]
    ]
    for mark in drawn.marks:
        point = orjson.loads(
            (
                tree / "search" / f"find_max_conc_{mark.load:g}" / f"conc_{mark.load:g}.json"
            ).read_bytes()
        )
        assert mark.throughput == point["output_throughput"]
        assert mark.interactivity == point["median_interactivity_tok_s_user"]
    assert [m.load for m in drawn.marks if m.answer] == [4.0]
    assert drawn.binding == "ttft:p99"


async def test_report_shows_the_search_in_chromium(tree: Path, tmp_path: Path) -> None:
    binary = find_chromium()
    assert binary is not None, "scripts/ensure-chromium installs Debian's chromium"
    report = tmp_path / "report.html"
    done = run_loadgen(["report", str(tree), "-o", str(report)])
    assert done.returncode == 0, done.stderr
    page = await open_page(binary, report.resolve().as_uri(), tmp_path / "r.png", FRONTIER_JS)
    assert page.errors == [], page.errors
    shown = page.evaluated
    [figure] = shown["images"]
    assert (
        figure["alt"] == "throughput vs interactivity with the capacity search's probes and answer"
    )
    assert figure["complete"] and figure["width"] > 0 and figure["shownWidth"] > 0
    found = capacity(tree)
    first_fail = int(found["first_fail"]["load"])
    assert shown["lines"] == [
        [
            "search",
            f"search: find-max conc: answer conc 4 (last pass conc 4, first fail conc "
            f"{first_fail}); binding objective ttft:p99; {len(found['probes'])} probes "
            "(a sweep of every conc measures 8)",
        ]
    ], shown["lines"]
    compared = run_loadgen(["compare", str(tree)])
    assert compared.returncode == 0, compared.stderr
    assert compared.stdout.rstrip().endswith(shown["lines"][0][1])  # the same line
