"""`loadgen compare` over request files damaged after the run (results/jsonl.py): a torn
last line (the run killed mid-write) is said in one line naming the file and line and
every whole record is still read; a `token_ids` that is not base64 is one error line
naming the file and line, never a traceback. The run is a real one against the real
simulator over real sockets, its outputs kept (--record-outputs)."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson
import pytest

from tests.support.procs import one_error_line, run_loadgen, simulator


@pytest.fixture(scope="module")
def measured(tmp_path_factory: pytest.TempPathFactory) -> Path:
    base = tmp_path_factory.mktemp("bad-records")
    with simulator(base / "sim.log") as url:
        done = run_loadgen(
            [
                "--base-url",
                url,
                "--conc",
                "2",
                "--prompts-per-conc",
                "3",
                "--warmup-per-conc",
                "0",
                "--isl",
                "16",
                "--osl",
                "8",
                "--encoder",
                "raw",
                "--record-outputs",
                "--no-progress",
                "--results",
                str(base / "run"),
            ]
        )
    assert done.returncode == 0, done.stderr
    return base / "run"


def _copy(measured: Path, tmp_path: Path, name: str) -> tuple[Path, Path]:
    run = tmp_path / name
    shutil.copytree(measured, run)
    return run, run / "requests_conc_2.jsonl"


def test_a_torn_last_line_is_said_and_the_rest_is_read(measured: Path, tmp_path: Path) -> None:
    run, requests = _copy(measured, tmp_path, "torn")
    lines = requests.read_bytes().splitlines(keepends=True)
    assert len(lines) == 6
    requests.write_bytes(b"".join(lines[:-1]) + lines[-1][: len(lines[-1]) // 2])
    done = run_loadgen(["compare", str(measured), str(run)])
    assert done.returncode == 0, done.stderr
    said = [line for line in done.stderr.splitlines() if "torn" in line]
    assert said == [
        f"loadgen: WARNING: {requests}: line 6 is torn (no newline: the run was stopped "
        "while writing it); read without it, 5 records before it"
    ], done.stderr
    assert "Traceback" not in done.stderr
    assert "conc" in done.stdout  # the comparison itself is there


def test_token_ids_that_are_not_base64_are_one_line(measured: Path, tmp_path: Path) -> None:
    run, requests = _copy(measured, tmp_path, "forged")
    lines = requests.read_bytes().splitlines(keepends=True)
    record = orjson.loads(lines[1])
    assert record["output"]["token_ids"]  # the simulator streams ids: the basis is ids
    record["output"]["token_ids"] = "not*base64!"
    lines[1] = orjson.dumps(record) + b"\n"
    requests.write_bytes(b"".join(lines))
    done = run_loadgen(["compare", str(measured), str(run)])
    assert "Traceback" not in done.stderr, done.stderr
    assert done.returncode != 0
    line = one_error_line(done.stderr)
    assert f"{requests}: line 2: field 'output.token_ids': not base64" in line, line
