"""Files loadgen reads back (--resume, merge, compare, report): anything that is not what
loadgen wrote is one `loadgen: error:` line naming the file and the field, exit 2.

One real sharded run against `loadgen sim` (two shards, two points) is made once; each
case copies it and damages one file the way a crash, an edit or a forgery would.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import orjson
import pytest

from tests.support.procs import SMALL, loadgen, one_error_line, run_loadgen, simulator


@pytest.fixture(scope="module")
def shards(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    base = tmp_path_factory.mktemp("shards")
    with simulator(base / "sim.log") as url:
        # at the same time, each point's measured phase started together (--shard-sync)
        running = [
            loadgen(
                [
                    "--base-url",
                    url,
                    "--conc",
                    "1,2",
                    "--prompts-per-conc",
                    "2",
                    "--warmup-per-conc",
                    "0",
                    "--shard",
                    f"{index}/2",
                    "--shard-sync",
                    str(base / "sync"),
                    "--results",
                    str(base / f"s{index}"),
                    *SMALL,
                ]
            )
            for index in range(2)
        ]
        for process in running:
            _, err = process.communicate(timeout=240)
            assert process.returncode == 0, err
    yield base / "s0", base / "s1"


def copies(shards: tuple[Path, Path], tmp_path: Path) -> tuple[Path, Path]:
    first, second = tmp_path / "s0", tmp_path / "s1"
    shutil.copytree(shards[0], first)
    shutil.copytree(shards[1], second)
    return first, second


def refused(args: list[str]) -> str:
    done = run_loadgen(args, timeout=120)
    assert done.returncode == 2, (done.returncode, done.stderr)
    return one_error_line(done.stderr)


def merge(first: Path, second: Path, out: Path) -> str:
    return refused(["merge", str(first), str(second), "--results", str(out)])


def test_the_intact_shards_merge(shards: tuple[Path, Path], tmp_path: Path) -> None:
    done = run_loadgen(
        ["merge", str(shards[0]), str(shards[1]), "--results", str(tmp_path / "m")], timeout=120
    )
    assert done.returncode == 0, done.stderr
    merged = orjson.loads((tmp_path / "m" / "conc_2.json").read_bytes())
    assert merged["shards_merged"] == 2 and merged["completed"] == 4


def test_a_torn_middle_record_line_is_named_by_line(
    shards: tuple[Path, Path], tmp_path: Path
) -> None:
    first, second = copies(shards, tmp_path)
    jsonl = first / "requests_conc_2.jsonl"
    lines = jsonl.read_bytes().splitlines(keepends=True)
    jsonl.write_bytes(lines[0][: len(lines[0]) // 2] + b"\n" + b"".join(lines[1:]))
    line = merge(first, second, tmp_path / "m")
    assert "requests_conc_2.jsonl: line 1: not a JSON record" in line


@pytest.mark.parametrize(
    ("field", "value", "expected"),
    [
        ("start_ns", "12", "field 'start_ns': Expected `int`, got `str`"),
        ("chunk_tokens", [-3, 1], "field 'chunk_tokens': a negative token count"),
        ("error", "exploded", "field 'error': Invalid enum value 'exploded'"),
    ],
)
def test_a_forged_record_is_named_by_field(
    shards: tuple[Path, Path], tmp_path: Path, field: str, value: object, expected: str
) -> None:
    first, second = copies(shards, tmp_path)
    jsonl = first / "requests_conc_1.jsonl"
    records = [orjson.loads(line) for line in jsonl.read_bytes().splitlines()]
    records[0][field] = value
    if field == "chunk_tokens":
        records[0]["chunk_ns"] = records[0]["chunk_ns"][:2]
    jsonl.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    line = merge(first, second, tmp_path / "m")
    assert "requests_conc_1.jsonl: line 1" in line and expected in line, line


def test_a_missing_record_file(shards: tuple[Path, Path], tmp_path: Path) -> None:
    first, second = copies(shards, tmp_path)
    (second / "requests_conc_1.jsonl").unlink()
    assert "requests_conc_1.jsonl: cannot read it" in merge(first, second, tmp_path / "m")


def test_run_json_fields_of_the_wrong_shape(shards: tuple[Path, Path], tmp_path: Path) -> None:
    first, second = copies(shards, tmp_path)
    run = orjson.loads((first / "run.json").read_bytes())
    (first / "run.json").write_bytes(orjson.dumps({**run, "shard": 0}))
    assert "run.json: field 'shard': Expected `object | null`, got `int`" in merge(
        first, second, tmp_path / "m"
    )
    del run["settings"]
    (first / "run.json").write_bytes(orjson.dumps(run))
    assert "run.json: missing field `settings`" in merge(first, second, tmp_path / "m2")


def test_point_files_of_another_shape(shards: tuple[Path, Path], tmp_path: Path) -> None:
    first, second = copies(shards, tmp_path)
    point = first / "conc_1.json"
    point.write_bytes(orjson.dumps([1, 2]))
    assert "conc_1.json: not a loadgen point result (a JSON list" in refused(
        ["compare", str(first)]
    )
    point.write_bytes(orjson.dumps({"max_concurrency": 1}))
    assert "conc_1.json: missing field `num_prompts`" in merge(first, second, tmp_path / "m")
    point.unlink()
    (tmp_path / "notes.txt").write_text("not json\n")
    os.symlink(tmp_path / "notes.txt", point)
    assert "conc_1.json: not valid JSON" in refused(
        ["report", str(first), "-o", str(tmp_path / "r.html")]
    )


def test_resume_on_a_point_entry_without_conc(shards: tuple[Path, Path], tmp_path: Path) -> None:
    first, _ = copies(shards, tmp_path)
    run = orjson.loads((first / "run.json").read_bytes())
    del run["points"][0]["conc"]
    (first / "run.json").write_bytes(orjson.dumps(run))
    line = refused(
        [
            "--resume",
            str(first),
            "--base-url",
            "http://127.0.0.1:9",
            "--conc",
            "1,2",
            "--prompts-per-conc",
            "2",
            "--warmup-per-conc",
            "0",
            "--shard",
            "0/2",
            *SMALL,
        ]
    )
    assert "run.json: missing field `points[0].conc`" in line, line


def test_merge_never_writes_over_another_run(shards: tuple[Path, Path], tmp_path: Path) -> None:
    first, second = copies(shards, tmp_path)
    other = tmp_path / "other"
    shutil.copytree(shards[0], other)
    before = (other / "run.json").read_bytes()
    assert "already holds a run" in merge(first, second, other)
    assert (other / "run.json").read_bytes() == before


def test_results_that_is_a_file(shards: tuple[Path, Path], tmp_path: Path) -> None:
    first, second = copies(shards, tmp_path)
    (tmp_path / "file").write_text("x")
    assert "--results" in merge(first, second, tmp_path / "file")


def test_a_dataset_that_is_a_device_or_a_fifo(tmp_path: Path) -> None:
    line = refused(
        [
            "--base-url",
            "http://127.0.0.1:9",
            "--conc",
            "1",
            "--dataset",
            "/dev/zero",
            "--results",
            str(tmp_path / "r"),
            *SMALL,
        ]
    )
    assert "/dev/zero: not a regular file" in line
    os.mkfifo(tmp_path / "fifo.jsonl")
    line = refused(
        [
            "--base-url",
            "http://127.0.0.1:9",
            "--conc",
            "1",
            "--dataset",
            str(tmp_path / "fifo.jsonl"),
            "--results",
            str(tmp_path / "r2"),
            *SMALL,
        ]
    )
    assert "fifo.jsonl: not a regular file" in line
