"""End to end: a sweep file with two simulator lanes (no speculation, MTP K=2) through the
real CLI, then `loadgen compare` and `loadgen report` on its tree, the report opened in a
real headless Chromium.

The simulator's step costs 1 ms plus 200 us per computed token, so MTP (3 tokens computed
per decoding request per step, 2.28 kept on average) is ahead at conc 1 and 4 (the fixed
cost dominates: about x1.2 at conc 4) and behind at conc 32 (about x0.85): the crossover
lies between 4 and 32. Every expected number below is recomputed from the lanes'
conc_<N>.json files, never written down.
"""

from __future__ import annotations

import csv
import itertools
import math
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

from tests.support.chromium_cdp import find_chromium, open_page

SIM = "--step-fixed-ms 1 --decode-token-us 200 --prefill-token-us 2 --seed 7"
SWEEP = f"""
# two lanes over the same concurrencies: only the speculation differs
conc: [1, 4, 32]
workload:
  isl: 64
  osl: 32
prompts-per-conc: 2
warmup-per-conc: 1
no-progress: true
slice-duration: 0.05
lanes:
  - name: no-spec
    target: {{sim: true, sim-args: "--spec-tokens 0 {SIM}"}}
  - name: mtp
    target:
      sim: true
      sim-args: "--spec-tokens 2 {SIM}"
"""
CONCS = (1, 4, 32)
FIELDS = {
    "throughput": "output_throughput",
    "interactivity": "median_interactivity_tok_s_user",
    "ttft_p50_ms": "median_ttft_ms",
    "ttft_p99_ms": "p99_ttft_ms",
    "tpot_p50_ms": "median_tpot_ms",
    "tpot_p99_ms": "p99_tpot_ms",
}


def loadgen(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """The sweep file run once for the module: (its results tree, the CLI's stdout)."""
    base = tmp_path_factory.mktemp("sweep")
    (base / "sweep.yaml").write_text(SWEEP)
    done = loadgen(
        "--config", str(base / "sweep.yaml"), "--results", str(base / "tree"), timeout=240
    )
    assert done.returncode == 0, done.stderr
    return base / "tree", done.stdout


def point(tree: Path, lane: str, conc: int) -> dict[str, Any]:
    return dict(orjson.loads((tree / lane / f"conc_{conc}.json").read_bytes()))


def test_the_sweep_file_writes_one_directory_per_lane(tree: tuple[Path, str]) -> None:
    root, stdout = tree
    index = orjson.loads((root / "lanes.json").read_bytes())
    assert [(lane["name"], lane["state"], lane["exit_code"]) for lane in index["lanes"]] == [
        ("no-spec", "succeeded", 0),
        ("mtp", "succeeded", 0),
    ]
    for lane, k in (("no-spec", "0"), ("mtp", "2")):
        run = orjson.loads((root / lane / "run.json").read_bytes())
        assert run["settings"]["sim_args"][:2] == ["--spec-tokens", k]
        assert run["settings"]["conc"] == list(CONCS)
        assert [p["conc"] for p in run["points"]] == list(CONCS)
    assert point(root, "no-spec", 4)["stream_acceptance_length"] is None  # no speculation
    assert point(root, "mtp", 4)["stream_acceptance_length"] > 1.5
    assert {"compare.csv", "compare.json", "report.html", "sweep.yaml"} <= {
        p.name for p in root.iterdir()
    }
    assert "baseline: no-spec" in stdout  # the run ends with the comparison


def expected_crossover(root: Path) -> tuple[int, int]:
    ratios = [
        (
            c,
            point(root, "mtp", c)["output_throughput"]
            / point(root, "no-spec", c)["output_throughput"],
        )
        for c in CONCS
    ]
    flips = [(c1, c2) for (c1, r1), (c2, r2) in itertools.pairwise(ratios) if (r1 > 1) != (r2 > 1)]
    assert ratios[0][1] > 1 > ratios[-1][1], f"the simulator should show a crossover: {ratios}"
    assert len(flips) == 1, ratios
    return flips[0]


def test_compare_ratios_equal_the_result_files(tree: tuple[Path, str], tmp_path: Path) -> None:
    root, _ = tree
    done = loadgen(
        "compare", str(root), "--csv", str(tmp_path / "c.csv"), "--json", str(tmp_path / "c.json")
    )
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "c.csv") as fh:
        rows = {(r["run"], int(r["conc"])): r for r in csv.DictReader(fh)}
    data = orjson.loads((tmp_path / "c.json").read_bytes())
    json_rows = {(r["run"], r["conc"]): r for r in data["rows"]}
    assert data["baseline"] == "no-spec" and data["throughput_field"] == "output_throughput"
    for conc in CONCS:
        base, mtp = point(root, "no-spec", conc), point(root, "mtp", conc)
        block = done.stdout.split(f"conc {conc}\n")[1].split("\n\n")[0]
        mtp_line = next(line for line in block.splitlines() if line.startswith("mtp "))
        for key, field in FIELDS.items():
            ratio = mtp[field] / base[field]
            assert json_rows[("mtp", conc)][f"{key}_ratio"] == ratio
            assert json_rows[("mtp", conc)][key] == mtp[field]
            assert json_rows[("no-spec", conc)][key] == base[field]
            assert math.isclose(float(rows[("mtp", conc)][f"{key}_ratio"]), ratio, rel_tol=1e-12)
            assert f"x{ratio:.2f}" in mtp_line, (key, mtp_line)
        assert json_rows[("mtp", conc)]["acceptance_length"] == mtp["stream_acceptance_length"]
    low, high = expected_crossover(root)
    assert (
        f"crossover: mtp is ahead up to conc {low}, no-spec from conc {high} on" in done.stdout
    ), done.stdout
    [crossing] = data["crossovers"]
    assert (crossing["low_conc"], crossing["high_conc"]) == (low, high)
    assert low < crossing["estimate"] < high


def check_slices(root: Path, tables: dict[str, Any]) -> None:
    """--slice-duration: every lane's slices are in the report, each cell the file's value,
    with a slice figure per concurrency and a request timeline per lane and concurrency."""
    assert "Time slices and request timeline" in tables["sections"]
    shown = {(t["run"], t["conc"]): t["rows"] for t in tables["slices"]}
    assert set(shown) == {(lane, c) for lane in ("no-spec", "mtp") for c in CONCS}
    for (lane, conc), rows in shown.items():
        slices = point(root, lane, conc)["slices"]
        assert len(rows) == len(slices) >= 1
        for row, expected in zip(rows, slices, strict=True):
            for name in ("start_s", "output_throughput", "in_flight_mean", "p50_ttft_ms"):
                if expected[name] is not None:
                    assert float(row[name][0]) == expected[name], (lane, conc, name)
        assert f"request timeline of {lane} at conc {conc}" in tables["alts"]
    assert all(f"time slices at conc {c}" in tables["alts"] for c in CONCS)


TABLES_JS = """(() => {
  const cells = (row) => Object.fromEntries([...row.querySelectorAll('td[data-value]')]
      .map(td => [td.dataset.field, [td.dataset.value, td.textContent]]));
  return {
    compare: [...document.querySelectorAll('table.compare tr.point')].map(tr => (
        {run: tr.dataset.run, conc: Number(tr.dataset.conc), cells: cells(tr)})),
    acceptance: [...document.querySelectorAll('#acceptance tr[data-run]')].map(tr => (
        {run: tr.dataset.run, conc: Number(tr.dataset.conc), cells: cells(tr)})),
    images: [...document.images].map(i => [i.complete, i.naturalWidth]),
    alts: [...document.images].map(i => i.alt),
    slices: [...document.querySelectorAll('table.slices')].map(t => (
        {run: t.dataset.run, conc: Number(t.dataset.conc),
         rows: [...t.querySelectorAll('tr[data-slice]')].map(cells)})),
    sections: [...document.querySelectorAll('h2')].map(h => h.textContent),
  };
})()"""


async def test_report_renders_in_chromium_with_the_result_files_numbers(
    tree: tuple[Path, str], tmp_path: Path
) -> None:
    binary = find_chromium()
    if binary is None:
        pytest.skip(
            "chromium is not installed and scripts/ensure-chromium could not "
            "install it (needs root and Debian's package lists)"
        )
    root, _ = tree
    report = tmp_path / "report.html"
    done = loadgen("report", str(root / "no-spec"), str(root / "mtp"), "-o", str(report))
    assert done.returncode == 0, done.stderr
    url = report.resolve().as_uri()
    page = await open_page(binary, url, tmp_path / "report.png", TABLES_JS)
    print(f"report screenshot: {page.screenshot}")
    assert page.errors == [], page.errors
    outside = [url for url in page.requests if not url.startswith(("file:", "data:"))]
    assert outside == [] and page.requests[0] == url
    assert page.screenshot is not None and page.screenshot.stat().st_size > 50_000
    tables = page.evaluated
    assert tables["images"] and all(done and width > 0 for done, width in tables["images"])
    assert "TTFT and ITL distributions" in tables["sections"]
    seen = set()
    for row in tables["compare"]:
        result = point(root, row["run"], row["conc"])
        base = point(root, "no-spec", row["conc"])
        for key, field in FIELDS.items():
            value, text = row["cells"][key]
            assert float(value) == result[field]
            assert text.replace(",", "") == f"{result[field]:.{1 if 'tpot' not in key else 2}f}"
            if row["run"] == "mtp":
                assert float(row["cells"][f"{key}_ratio"][0]) == result[field] / base[field]
        seen.add((row["run"], row["conc"]))
    assert seen == {(lane, c) for lane in ("no-spec", "mtp") for c in CONCS}
    check_slices(root, tables)
    accepted = {(r["run"], r["conc"]): r["cells"] for r in tables["acceptance"]}
    assert {run for run, _ in accepted} == {"mtp"}  # no speculation, no acceptance row
    for conc in CONCS:
        result = point(root, "mtp", conc)
        for i, rate in enumerate(result["stream_acceptance_per_position"]):
            assert float(accepted[("mtp", conc)][f"stream_acceptance_per_position[{i}]"][0]) == rate
