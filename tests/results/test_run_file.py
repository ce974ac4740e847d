"""run.json as written (results/run_file.py): the RunRecord it is read back as, encoded.
A real `--sim` run writes the keys the previous writer (a dict built by hand) wrote
(tests/fixtures/run_file_writer: that writer's files from the same flags), so the tools
that read run.json by name keep reading it; and write -> read -> write is the same bytes."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import msgspec
import orjson
import pytest

from loadgen.client.preflight import ServerInfo
from loadgen.results.run_record import ServerFacts, decode_run, encode_run
from tests.support.procs import run_loadgen

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures"
WRITER_FIXTURES = FIXTURES / "run_file_writer"
FLAGS = ["--sim", "--isl", "32", "--osl", "16", "--encoder", "raw", "--no-progress"]
FLAGS += ["--prompts-per-conc", "2", "--warmup-per-conc", "0"]
# fixture name -> the flags its run added
RUNS = {"plain": ["--conc", "1,2"], "trials": ["--conc", "1", "--trials", "2"]}
# Objects whose keys are data (a setting's, a metric's, an option's name), not run.json's
# own: their presence is compared, not their keys (the settings' names have their tests
# in test_run_record.py).
DATA_KEYED = frozenset(
    {"settings", "samples", "keyed", "options", "tokenize_check", "engine_unavailable"}
)


def key_paths(value: object, path: str = "") -> set[str]:
    """Every key of a JSON document by its path (a list's items share `[]`)."""
    if isinstance(value, list):
        return {p for item in value for p in key_paths(item, f"{path}[]")}
    if not isinstance(value, dict) or path.rpartition(".")[2] in DATA_KEYED:
        return set()
    found = set()
    for key, item in value.items():
        found |= {f"{path}.{key}"} | key_paths(item, f"{path}.{key}")
    return found


def real_run(results: Path, name: str) -> bytes:
    run = run_loadgen([*FLAGS, *RUNS[name], "--results", str(results)])
    assert run.returncode == 0, run.stderr
    return (results / "run.json").read_bytes()


@pytest.mark.parametrize("name", RUNS)
def test_a_real_run_writes_the_keys_the_previous_writer_wrote(tmp_path: Path, name: str) -> None:
    data = real_run(tmp_path / "run", name)
    written = orjson.loads(data)
    before = orjson.loads((WRITER_FIXTURES / f"{name}.json").read_bytes())
    assert key_paths(written) == key_paths(before)
    assert list(written) == list(before)  # and in the same order
    assert encode_run(decode_run(data, tmp_path / "run.json")) == data


@pytest.mark.parametrize("name", RUNS)
def test_the_previous_writers_file_is_written_back_byte_for_byte(name: str) -> None:
    """Read and written again, a file of the hand-built writer is the same bytes: the same
    names, order, nulls and omissions, numbers spelled the same."""
    path = WRITER_FIXTURES / f"{name}.json"
    assert encode_run(decode_run(path.read_bytes(), path)) == path.read_bytes()


def test_an_older_run_file_is_written_back_as_the_same_record() -> None:
    """A run.json of an earlier release (before stream_interval and the engine fields)
    reads, writes and reads back as the same record (its absent fields as unknown)."""
    path = FIXTURES / "run_file_main" / "run.json"
    record = decode_run(path.read_bytes(), path)
    assert decode_run(encode_run(record), path) == record
    # written before each shard's view of the server was kept: unknown, not an error
    assert record.server is not None and record.server.rtt_ms is None
    assert record.shards == ()


def test_the_server_is_recorded_field_for_field() -> None:
    """Every field the preflight finds is a field of the record, in its order: a field
    added to ServerInfo alone would be dropped from run.json."""
    found = [field.name for field in dataclasses.fields(ServerInfo)]
    assert [field.name for field in msgspec.structs.fields(ServerFacts)] == [
        *found,
        "stream_interval",
    ]
