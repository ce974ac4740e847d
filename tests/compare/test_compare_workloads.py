"""`loadgen compare` on runs that measured different work: one warning line, because a
ratio between a 48/16 run and a 96/8 run says nothing about the servers.

Three real runs against one `loadgen sim` (so the server is the same and only the workload
differs where the test says so).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import orjson
import pytest

FLAGS = [
    "--conc",
    "1",
    "--prompts-per-conc",
    "2",
    "--warmup-per-conc",
    "0",
    "--encoder",
    "raw",
    "--no-progress",
]


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
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    base = tmp_path_factory.mktemp("workloads")
    shapes = {"short": ("48", "16"), "short-again": ("48", "16"), "long": ("96", "8")}
    made = {}
    for name, (isl, osl) in shapes.items():
        made[name] = base / name
        done = loadgen(
            "--sim",
            "--sim-args",
            "--step-fixed-ms 1 --spin-us 0",
            "--isl",
            isl,
            "--osl",
            osl,
            *FLAGS,
            "--results",
            str(made[name]),
        )
        assert done.returncode == 0, done.stderr
    return made


def test_runs_of_different_workloads_get_one_warning_line(
    runs: dict[str, Path], tmp_path: Path
) -> None:
    done = loadgen(
        "compare", str(runs["short"]), str(runs["long"]), "--json", str(tmp_path / "c.json")
    )
    assert done.returncode == 0, done.stderr
    warned = [line for line in done.stdout.splitlines() if "different workloads" in line]
    assert warned == [
        "WARNING: the runs measured different workloads (isl 48 (short) vs 96 "
        "(long); osl 16 (short) vs 8 (long)): their ratios compare different "
        "work, not only different servers"
    ]
    assert orjson.loads((tmp_path / "c.json").read_bytes())["workload_mismatch"] == warned[
        0
    ].removeprefix("WARNING: ")


def test_runs_of_the_same_workload_get_none(runs: dict[str, Path], tmp_path: Path) -> None:
    done = loadgen(
        "compare", str(runs["short"]), str(runs["short-again"]), "--json", str(tmp_path / "c.json")
    )
    assert done.returncode == 0, done.stderr
    assert "different workloads" not in done.stdout
    assert orjson.loads((tmp_path / "c.json").read_bytes())["workload_mismatch"] is None
