"""capacity.json names each probe's directory; `loadgen report` and `compare` follow it.
A path that leads out of the search's directory (`../x`, an absolute path, a link) read
another run as this search's probe. Now: exit 2, one line, nothing read. A real search by
the real CLI against a real `loadgen sim`, then its capacity.json edited."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support.procs import free_port, one_error_line, run_loadgen, start_sim
from tests.support.procs import stop as stop_sim

SEARCH = [
    *("--conc", "1..2:+1", "--prompts-per-conc", "4", "--warmup-per-conc", "0"),
    *("--isl", "32", "--osl", "8", "--encoder", "raw", "--no-progress"),
    *("--find-max", "conc", "--slo", "ttft:p99=60000ms"),
]


@pytest.fixture(scope="module")
def search(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    port = free_port()
    base = tmp_path_factory.mktemp("capacity")
    sim = start_sim(port, base / "sim.log")
    try:
        results = base / "search"
        done = run_loadgen(
            ["--base-url", f"http://127.0.0.1:{port}", *SEARCH, "--results", str(results)]
        )
        assert done.returncode == 0, done.stderr
    finally:
        stop_sim(sim)
    yield results


def _copy_with(search: Path, tmp_path: Path, name: str) -> Path:
    """The search copied, its first probe's `results` set to `name`; the probe's own
    directory moved to tmp_path/outside (where `name` may lead)."""
    copy = tmp_path / "search"
    shutil.copytree(search, copy)
    capacity = orjson.loads((copy / "capacity.json").read_bytes())
    first = capacity["probes"][0]["results"]
    (copy / first).rename(tmp_path / "outside")
    for probe in [*capacity["probes"], capacity["last_pass"], capacity["first_fail"]]:
        if probe is not None and probe["results"] == first:
            probe["results"] = name
    (copy / "capacity.json").write_bytes(orjson.dumps(capacity))
    return copy


@pytest.mark.parametrize("how", ["parent", "absolute", "link"])
def test_probe_paths_out_of_the_directory_are_refused(
    search: Path, tmp_path: Path, how: str
) -> None:
    name = {
        "parent": "../outside",
        "absolute": str(tmp_path / "outside"),
        "link": "find_max_conc_99",
    }[how]
    copy = _copy_with(search, tmp_path, name)
    if how == "link":
        (copy / name).symlink_to(tmp_path / "outside", target_is_directory=True)
    done = run_loadgen(["report", str(copy), "-o", str(tmp_path / "report.html")])
    assert done.returncode == 2, done.stderr
    assert f"probe results {name!r} is not a find_max_* directory inside" in done.stderr
    assert "Traceback" not in done.stderr
    assert not (tmp_path / "report.html").exists()


def test_probe_paths_inside_the_directory_are_read(search: Path, tmp_path: Path) -> None:
    done = run_loadgen(["report", str(search), "-o", str(tmp_path / "report.html")])
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "report.html").stat().st_size > 0


@pytest.mark.parametrize("how", ["parent", "absolute"])
def test_compare_refuses_probe_paths_out_of_the_directory(
    search: Path, tmp_path: Path, how: str
) -> None:
    """`loadgen compare` reads a search's probes as its points (compare/capacity_inputs.py):
    a probe path out of the directory is one line and exit 2, no table and no CSV; the
    other run, the search itself unedited, is fine alone."""
    name = {"parent": "../outside", "absolute": str(tmp_path / "outside")}[how]
    copy = _copy_with(search, tmp_path, name)
    csv = tmp_path / "compare.csv"
    done = run_loadgen(["compare", str(search), str(copy), "--csv", str(csv)])
    assert done.returncode == 2, done.stderr
    line = one_error_line(done.stderr)
    assert f"probe results {name!r} is not a find_max_* directory inside" in line, line
    assert done.stdout == ""
    assert not csv.exists()
    alone = run_loadgen(["compare", str(search), str(search)])
    assert alone.returncode == 0, alone.stderr
