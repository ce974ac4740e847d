"""`--find-max --resume` re-run with other settings: each probe it would read back was
measured with the earlier settings, so the search is refused (exit 2, one line) as
`--resume` of a run is, never answered from the old probes. Real CLI processes against a
real `loadgen sim`."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support.procs import free_port, one_error_line, run_loadgen, start_sim
from tests.support.procs import stop as stop_sim

SEARCH = [
    "--conc",
    "1..2:+1",
    "--prompts-per-conc",
    "4",
    "--warmup-per-conc",
    "0",
    "--encoder",
    "raw",
    "--no-progress",
    "--find-max",
    "conc",
    "--slo",
    "ttft:p99=60000ms",
]
FIRST = ["--isl", "32", "--osl", "8", "--seed", "1"]


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[str]]:
    port = free_port()
    sim = start_sim(port, tmp_path_factory.mktemp("sim") / "sim.log")
    try:
        yield ["--base-url", f"http://127.0.0.1:{port}"]
    finally:
        stop_sim(sim)


@pytest.fixture(scope="module")
def searched(tmp_path_factory: pytest.TempPathFactory, target: list[str]) -> Path:
    results = tmp_path_factory.mktemp("search") / "found"
    done = run_loadgen([*target, *SEARCH, *FIRST, "--results", str(results)])
    assert done.returncode == 0, done.stderr
    assert orjson.loads((results / "capacity.json").read_bytes())["finished"] is True
    return results


@pytest.mark.parametrize(
    ("changed", "named"),
    [
        (["--isl", "48", "--osl", "8", "--seed", "1"], "isl 48 (was 32)"),
        (["--isl", "32", "--osl", "16", "--seed", "1"], "osl 16 (was 8)"),
        (["--isl", "32", "--osl", "8", "--seed", "2"], "seed 2 (was 1)"),
    ],
)
def test_resume_with_other_settings_is_refused(
    searched: Path, target: list[str], changed: list[str], named: str
) -> None:
    before = (searched / "capacity.json").read_bytes()
    done = run_loadgen([*target, *SEARCH, *changed, "--resume", str(searched)])
    assert done.returncode == 2, done.stderr
    assert "the settings differ from the run being resumed" in done.stderr, done.stderr
    assert named in done.stderr, done.stderr
    assert "Traceback" not in done.stderr
    assert "read back (measured before)" not in done.stderr
    assert (searched / "capacity.json").read_bytes() == before  # the old answer stands


def test_resume_against_another_server_is_refused(searched: Path, tmp_path: Path) -> None:
    port = free_port()
    other = start_sim(port, tmp_path / "other.log")
    try:
        done = run_loadgen(
            ["--base-url", f"http://127.0.0.1:{port}", *SEARCH, *FIRST, "--resume", str(searched)]
        )
    finally:
        stop_sim(other)
    assert done.returncode == 2, done.stderr
    assert "base_url" in done.stderr and "the settings differ" in done.stderr, done.stderr


def test_resume_with_the_same_settings_reads_the_probes_back(
    searched: Path, target: list[str]
) -> None:
    done = run_loadgen([*target, *SEARCH, *FIRST, "--resume", str(searched)])
    assert done.returncode == 0, done.stderr
    assert "read back (measured before)" in done.stderr
    assert "find-max probe 1: conc" in done.stderr


def _tree(directory: Path) -> dict[str, bytes]:
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def test_resume_when_the_server_now_serves_another_model_is_refused(tmp_path: Path) -> None:
    """The same flags (no --model) and the same URL, but the server restarted with another
    model: the settings match, so before every probe was read back and the old search
    answered with exit 0. Now: exit 2, one line naming both models, every file kept."""
    port = free_port()
    target = ["--base-url", f"http://127.0.0.1:{port}"]
    results = tmp_path / "found"

    def search_against(model: str, *argv: str) -> subprocess.CompletedProcess[str]:
        sim = start_sim(port, tmp_path / f"{model}.log", "--model", model)
        try:
            return run_loadgen([*target, *SEARCH, *FIRST, *argv])
        finally:
            stop_sim(sim)

    done = search_against("model-a", "--results", str(results))
    assert done.returncode == 0, done.stderr
    kept = _tree(results)
    assert any(name.startswith("find_max_conc_") for name in kept)
    done = search_against("model-b", "--resume", str(results))
    assert done.returncode == 2, done.stderr
    line = one_error_line(done.stderr)
    assert "the server now serves 'model-b'; the run being resumed measured 'model-a'" in line
    assert "read back (measured before)" not in done.stderr
    assert _tree(results) == kept
