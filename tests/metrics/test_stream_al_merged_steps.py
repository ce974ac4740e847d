"""End to end: no output publishes a stream AL the stream cannot support.

The real CLI drives the embedded simulator over real sockets with --stream-interval 10
and K=6: each chunk carries ~10 engine steps (~28 tokens), so chunk sizes are no longer
acceptance samples and the stream AL (once 27.1, rate 4.35) must be null everywhere,
with the server counters' AL shown in its place, labelled. A control run at stream
interval 1 shows the stream's own AL, unlabelled. Every number expected below is read
from the run's own conc_<N>.json, never written down.
"""

from __future__ import annotations

import csv
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest

K = 6
CONCS = (1, 4)
ARGS = (
    "--isl",
    "64",
    "--osl",
    "96",
    "--prompts-per-conc",
    "2",
    "--warmup-per-conc",
    "1",
    "--no-progress",
)


def loadgen(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen", *args],
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )


def sweep(results: Path, interval: int, concs: tuple[int, ...]) -> str:
    done = loadgen(
        "--sim",
        "--sim-args",
        f"--stream-interval {interval} --spec-tokens {K}",
        "--conc",
        ",".join(map(str, concs)),
        *ARGS,
        "--results",
        str(results),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    base = tmp_path_factory.mktemp("al")
    return {
        "base": base,
        "merged_out": sweep(base / "merged", 10, CONCS),
        "clean_out": sweep(base / "clean", 1, (1,)),
    }


def point(run: Path, conc: int) -> dict[str, Any]:
    return dict(orjson.loads((run / f"conc_{conc}.json").read_bytes()))


def al_cells(stdout: str) -> dict[int, str]:
    """conc -> the console table's AL cell (the text after the TPOT column)."""
    lines = stdout.splitlines()
    header = next(i for i, line in enumerate(lines) if line.startswith("conc "))
    cells = {}
    for line in lines[header + 2 :]:
        match = re.match(r"\s*(\d+)\s.*\s(\d+\.\d\d(?: \(server\))?)$", line)
        if match is None:
            break
        cells[int(match.group(1))] = match.group(2)
    return cells


def test_the_point_results_hold_no_stream_figures_and_say_why(runs: dict[str, Any]) -> None:
    for conc in CONCS:
        result = point(runs["base"] / "merged", conc)
        assert result["stream_acceptance_decode_chunks"] > 0
        oversized = result["stream_acceptance_oversized_chunks"]
        assert oversized > 0
        for key in (
            "stream_acceptance_length",
            "stream_acceptance_rate",
            "stream_acceptance_per_position",
            "acceptance_length_diff",
            "acceptance_rate_diff",
            "acceptance_per_position_diff",
        ):
            assert result[key] is None, key
        assert result["stream_acceptance_invalid_reason"].startswith(
            f"{oversized} of {result['stream_acceptance_decode_chunks']} decode chunks "
            f"carried more than K+1={K + 1} tokens"
        )
        server = result["server_acceptance_length"]
        assert 1.0 <= server <= K + 1
        assert result["acceptance_length"] == server
        assert result["acceptance_length_source"] == "server_counters"
        assert result["itl_chunks_merged_steps"] is True
    clean = point(runs["base"] / "clean", 1)
    assert clean["stream_acceptance_oversized_chunks"] == 0
    assert clean["stream_acceptance_invalid_reason"] is None
    assert clean["acceptance_length"] == clean["stream_acceptance_length"] <= K + 1
    assert clean["acceptance_length_source"] == "stream"
    assert clean["itl_chunks_merged_steps"] is False
    assert 0.0 <= clean["stream_acceptance_rate"] <= 1.0


def test_the_console_table_shows_the_server_al_labelled(runs: dict[str, Any]) -> None:
    cells = al_cells(runs["merged_out"])
    assert set(cells) == set(CONCS), runs["merged_out"]
    for conc, cell in cells.items():
        server = point(runs["base"] / "merged", conc)["server_acceptance_length"]
        assert cell == f"{server:.2f} (server)"
    assert "AL (server): from the server's spec-decode counters" in runs["merged_out"]
    clean = point(runs["base"] / "clean", 1)["stream_acceptance_length"]
    assert al_cells(runs["clean_out"]) == {1: f"{clean:.2f}"}
    assert "AL (server)" not in runs["clean_out"]


def test_sweep_csv_holds_the_best_source(runs: dict[str, Any]) -> None:
    with open(runs["base"] / "merged" / "sweep.csv") as fh:
        rows = {int(r["conc"]): r for r in csv.DictReader(fh)}
    assert set(rows) == set(CONCS)
    for conc, row in rows.items():
        result = point(runs["base"] / "merged", conc)
        assert row["stream_acceptance_length"] == ""
        assert float(row["acceptance_length"]) == result["server_acceptance_length"] <= K + 1
        assert row["acceptance_length_source"] == "server_counters"


def test_compare_shows_the_best_source_and_warns_per_point(
    runs: dict[str, Any], tmp_path: Path
) -> None:
    merged, clean = runs["base"] / "merged", runs["base"] / "clean"
    done = loadgen(
        "compare",
        str(clean),
        str(merged),
        "--csv",
        str(tmp_path / "c.csv"),
        "--json",
        str(tmp_path / "c.json"),
    )
    assert done.returncode == 0, done.stderr
    with open(tmp_path / "c.csv") as fh:
        csv_rows = {(r["run"], int(r["conc"])): r for r in csv.DictReader(fh)}
    data = orjson.loads((tmp_path / "c.json").read_bytes())
    json_rows = {(r["run"], r["conc"]): r for r in data["rows"]}
    for conc in CONCS:
        server = point(merged, conc)["server_acceptance_length"]
        assert json_rows[("merged", conc)]["acceptance_length"] == server <= K + 1
        assert json_rows[("merged", conc)]["acceptance_length_source"] == "server_counters"
        assert float(csv_rows[("merged", conc)]["acceptance_length"]) == server
        assert csv_rows[("merged", conc)]["acceptance_length_source"] == "server_counters"
        assert f"{server:.2f} (server)" in done.stdout
    assert json_rows[("clean", 1)]["acceptance_length_source"] == "stream"
    warned = {
        (w["run"], w["conc"]) for w in data["warnings"] if "itl_chunks_merged_steps" in w["message"]
    }
    assert warned == {("merged", conc) for conc in CONCS}
    for conc in CONCS:
        assert f"merged conc {conc}: " in done.stdout


def test_the_html_report_shows_no_merged_steps_figure(runs: dict[str, Any], tmp_path: Path) -> None:
    merged, clean = runs["base"] / "merged", runs["base"] / "clean"
    report = tmp_path / "report.html"
    done = loadgen("report", str(clean), str(merged), "-o", str(report))
    assert done.returncode == 0, done.stderr
    text = report.read_text()
    table = text.split('<table id="acceptance">')[1].split("</table>")[0]
    rows = {
        (m.group(1), int(m.group(2))): m.group(3)
        for m in re.finditer(r'<tr data-run="([^"]+)" data-conc="(\d+)">(.*?)</tr>', table)
    }
    assert set(rows) == {("clean", 1)} | {("merged", c) for c in CONCS}
    for conc in CONCS:
        row = rows[("merged", conc)]
        assert "stream_acceptance_per_position" not in row
        assert '<td data-field="acceptance_length_source">server</td>' in row
        server = point(merged, conc)["server_acceptance_length"]
        assert f'data-field="acceptance_length" data-value="{server!r}"' in row
    assert "stream_acceptance_per_position[0]" in rows[("clean", 1)]
    # No acceptance figure anywhere in the report above K+1, no rate above 1.
    for field, value in re.findall(
        r'data-field="([^"]*acceptance[^"]*)" data-value="([^"]+)"', text
    ):
        if field.endswith("_ratio"):
            continue  # run / baseline, not an acceptance figure
        limit = K + 1 if "acceptance_length" in field else 1.0  # else rates
        assert float(value) <= limit, (field, value)


def test_a_known_stream_interval_voids_chunks_that_look_like_one_step(tmp_path: Path) -> None:
    # K=1 and nothing accepted: two steps of 1 token make chunks of 2 = K+1 tokens, which
    # one step could emit. Only the simulator's known --stream-interval tells them apart
    # (the stream would say AL 2.0 against the server's 1.0).
    done = loadgen(
        "--sim",
        "--sim-args",
        "--stream-interval 2 --spec-tokens 1 --acceptance 0",
        "--conc",
        "1",
        *ARGS,
        "--results",
        str(tmp_path / "run"),
    )
    assert done.returncode == 0, done.stderr[-3000:]
    result = point(tmp_path / "run", 1)
    assert result["stream_acceptance_decode_chunks"] > 0
    assert result["stream_acceptance_oversized_chunks"] == 0
    assert result["stream_acceptance_length"] is None
    assert result["stream_acceptance_invalid_reason"] == (
        "the server streams every 2 engine steps: each chunk merges steps"
    )
    assert result["acceptance_length"] == result["server_acceptance_length"] == 1.0
    assert al_cells(done.stdout) == {1: "1.00 (server)"}
