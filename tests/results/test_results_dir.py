"""A results directory that holds a run is never written over silently (real CLI, real
simulator): refused with one line, or replaced whole with --overwrite."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from loadgen.config.args import default_results_dir
from tests.support.procs import (
    SMALL,
    one_error_line,
    point,
    run_file,
    run_loadgen,
    simulator,
)


@pytest.fixture(scope="module")
def sim_url(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    with simulator(tmp_path_factory.mktemp("sim") / "sim.log") as url:
        yield url


def _run(url: str, results: Path, conc: str, *extra: str) -> subprocess.CompletedProcess[str]:
    return run_loadgen(
        [
            "--base-url",
            url,
            "--conc",
            conc,
            *SMALL,
            "--prompts-per-conc",
            "2",
            "--warmup-per-conc",
            "0",
            "--results",
            str(results),
            *extra,
        ]
    )


def test_a_second_run_into_the_same_directory_is_refused(sim_url: str, tmp_path: Path) -> None:
    results = tmp_path / "results"
    first = _run(sim_url, results, "2,4")
    assert first.returncode == 0, first.stderr
    before = {p.name: p.read_bytes() for p in results.iterdir() if p.is_file()}
    second = _run(sim_url, results, "8")
    assert second.returncode == 2
    line = one_error_line(second.stderr)
    assert f"--results {results} already holds a run" in line
    assert "--resume" in line and "--overwrite" in line
    after = {p.name: p.read_bytes() for p in results.iterdir() if p.is_file()}
    assert after == before  # not one byte changed


def test_overwrite_replaces_the_run_and_leaves_other_files(sim_url: str, tmp_path: Path) -> None:
    results = tmp_path / "results"
    assert _run(sim_url, results, "2,4").returncode == 0
    (results / "NOTES.txt").write_text("mine")
    replaced = _run(sim_url, results, "8", "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert not (results / "conc_2.json").exists() and not (results / "conc_4.json").exists()
    assert not (results / "requests_conc_2.jsonl").exists()
    assert [p["conc"] for p in run_file(results)["points"]] == [8]
    assert point(results, 8)["complete"] is True
    assert (results / "sweep.csv").read_text().count("\n") == 2  # header + conc 8
    assert (results / "NOTES.txt").read_text() == "mine"


def test_an_empty_or_unrelated_directory_is_fine(sim_url: str, tmp_path: Path) -> None:
    (tmp_path / "README").write_text("an existing directory with other files")
    done = _run(sim_url, tmp_path, "2")
    assert done.returncode == 0, done.stderr
    assert point(tmp_path, 2)["complete"] is True


def test_default_directories_of_the_same_second_differ(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    first = default_results_dir(now=1_800_000_000)
    first.mkdir(parents=True)
    second = default_results_dir(now=1_800_000_000)
    assert second != first and second.name == f"{first.name}-2"


def test_an_older_run_file_without_a_newer_setting_still_resumes(
    sim_url: str, tmp_path: Path
) -> None:
    """A run.json an earlier loadgen wrote has no key for a setting added since
    (conc_stages): left unset, it is the same run; a setting that differs is still refused."""
    results = tmp_path / "results"
    assert _run(sim_url, results, "2").returncode == 0
    path = results / "run.json"
    run = json.loads(path.read_text())
    del run["settings"]["conc_stages"]
    path.write_text(json.dumps(run))
    resume = ["--base-url", sim_url, "--conc", "2", *SMALL, "--prompts-per-conc", "2"]
    resume += ["--warmup-per-conc", "0", "--resume", str(results)]
    resumed = run_loadgen(resume)
    assert resumed.returncode == 0, resumed.stderr
    run["settings"]["osl"] = 999
    path.write_text(json.dumps(run))
    refused = run_loadgen(resume)
    assert refused.returncode == 2
    assert "osl" in one_error_line(refused.stderr)
