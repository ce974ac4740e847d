"""This machine's limits: file descriptors and a full or failing disk (real CLI processes,
a real simulator, real kernel limits: RLIMIT_NOFILE, a small tmpfs, RLIMIT_FSIZE)."""

from __future__ import annotations

import contextlib
import os
import resource
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadgen.run.limits import FD_HEADROOM
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


def _limit_files(soft: int, hard: int) -> None:
    resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))


def test_a_hard_fd_limit_below_the_concurrency_is_refused_before_any_request(
    sim_url: str, tmp_path: Path
) -> None:
    done = run_loadgen(
        ["--base-url", sim_url, "--conc", "4,512", *SMALL, "--results", str(tmp_path / "r")],
        preexec_fn=lambda: _limit_files(256, 256),
    )
    assert done.returncode == 1
    line = one_error_line(done.stderr)
    assert f"--conc 512 needs about {512 + FD_HEADROOM} open files" in line
    assert "at most 256" in line and "ulimit -n" in line
    assert not (tmp_path / "r" / "conc_4.json").exists()  # refused before conc 4 too


def test_a_low_soft_fd_limit_is_raised(sim_url: str, tmp_path: Path) -> None:
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    if hard != resource.RLIM_INFINITY and hard < 1024:
        pytest.skip(f"this machine's hard fd limit ({hard}) is below the 1024 this test needs")
    results = tmp_path / "r"
    done = run_loadgen(
        [
            "--base-url",
            sim_url,
            "--conc",
            "300",
            *SMALL,
            "--prompts-per-conc",
            "1",
            "--warmup-per-conc",
            "1",
            "--results",
            str(results),
        ],
        preexec_fn=lambda: _limit_files(200, hard),
    )
    assert done.returncode == 0, done.stderr
    result = point(results, 300)
    assert result["completed"] == 300 and result["failed"] == 0


EAT_FDS_THEN_RUN = """
import os, resource, sys
from loadgen.cli import main
soft = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
# Another part of this process holds nearly every descriptor the limit allows (a leak):
# the sweep passes the up-front check, then runs out while opening connections.
held = [os.open(os.devnull, os.O_RDONLY) for _ in range(soft - 70)]
sys.exit(main(sys.argv[1:]))
"""


def test_running_out_of_descriptors_mid_run_stops_it_and_is_not_a_connect_error(
    sim_url: str, tmp_path: Path
) -> None:
    results = tmp_path / "r"
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            EAT_FDS_THEN_RUN,
            "--base-url",
            sim_url,
            "--conc",
            "100",
            *SMALL,
            "--prompts-per-conc",
            "2",
            "--warmup-per-conc",
            "0",
            "--results",
            str(results),
        ],
        capture_output=True,
        text=True,
        timeout=240,
        stdin=subprocess.DEVNULL,
        preexec_fn=lambda: _limit_files(400, 400),
    )
    assert done.returncode == 1, done.stderr
    assert "ran out of file descriptors" in one_error_line(done.stderr)
    jsonl = (results / "requests_conc_100.jsonl").read_text()
    assert "Too many open files" not in jsonl  # never recorded as the server's failure
    run = run_file(results)
    assert run["stop_reason"] == "out_of_file_descriptors"


def _disk_full_run(
    sim_url: str, results: Path, *extra: str, **popen: Any
) -> subprocess.CompletedProcess[str]:
    return run_loadgen(
        [
            "--base-url",
            sim_url,
            "--conc",
            "4",
            *SMALL,
            "--prompts-per-conc",
            "40",
            "--warmup-per-conc",
            "0",
            "--results",
            str(results),
            *extra,
        ],
        **popen,
    )


def _check_stopped_cleanly(
    done: subprocess.CompletedProcess[str], results: Path, reason: str
) -> None:
    assert done.returncode == 1, done.stderr
    line = one_error_line(done.stderr)
    assert f"cannot write {results}/requests_conc_4.jsonl: {reason}" in line
    assert "intact (no torn line)" in line
    data = (results / "requests_conc_4.jsonl").read_bytes()
    assert data.endswith(b"\n"), "a torn last line"
    intact = int(line.split("its ")[1].split(" records")[0])
    assert intact == data.count(b"\n") > 0
    for row in data.splitlines():  # every line whole and valid
        assert row.startswith(b'{"request_id":') and row.endswith(b"}")


@contextlib.contextmanager
def _small_tmpfs(where: Path, size: str) -> Iterator[Path]:
    where.mkdir()
    mounted = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(where)],
        capture_output=True,
        text=True,
    )
    if mounted.returncode != 0:
        pytest.skip(
            f"cannot mount a tmpfs here ({mounted.stderr.strip()}); "
            "test_file_size_limit covers the same path without root"
        )
    try:
        yield where
    finally:
        subprocess.run(["umount", str(where)], check=True)


def test_a_full_disk_stops_the_run_with_every_line_whole(sim_url: str, tmp_path: Path) -> None:
    with _small_tmpfs(tmp_path / "disk", "16k") as disk:
        results = disk / "r"
        done = _disk_full_run(sim_url, results)
        _check_stopped_cleanly(done, results, "No space left on device (ENOSPC)")
        assert "not written" in one_error_line(done.stderr) or (
            point(results, 4)["stop_reason"] == "results_write_failed"
        )


def test_file_size_limit_stops_the_run_with_every_line_whole(sim_url: str, tmp_path: Path) -> None:
    """RLIMIT_FSIZE: a write past it fails with EFBIG (Python ignores SIGXFSZ), part-way
    through a line, as on a full disk; run.json and conc_4.json stay below it."""
    results = tmp_path / "r"
    limit = 20_000  # above conc_4.json (~12.3 kB), below the 40-line JSONL (~60 kB)
    done = _disk_full_run(
        sim_url,
        results,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
    )
    _check_stopped_cleanly(done, results, "File too large (EFBIG)")
    assert os.path.getsize(results / "requests_conc_4.jsonl") < limit
    stopped = point(results, 4)
    assert stopped["complete"] is False and stopped["stop_reason"] == "results_write_failed"
    assert run_file(results)["stop_reason"] == "results_write_failed"


def test_file_size_limit_stops_a_workers_run_with_every_line_whole(
    sim_url: str, tmp_path: Path
) -> None:
    """--workers 2: the parent writes the JSONL of the records the workers send back; a
    line it cannot write stops every worker and the run, as in one process."""
    results = tmp_path / "r"
    limit = 20_000  # above conc_4.json (~12.3 kB), below the 40-line JSONL (~60 kB)
    done = _disk_full_run(
        sim_url,
        results,
        "--workers",
        "2",
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit)),
    )
    _check_stopped_cleanly(done, results, "File too large (EFBIG)")
    stopped = point(results, 4)
    assert stopped["complete"] is False and stopped["stop_reason"] == "results_write_failed"
    assert run_file(results)["stop_reason"] == "results_write_failed"
