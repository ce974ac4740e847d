"""run.json as written (results/run_file.py): a real `--sim` run writes the keys the
previous writer wrote (tests/fixtures/run_file_writer: that writer's files from the same
flags), so the tools that read run.json by name keep reading it."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest

from tests.support.procs import run_loadgen

WRITER_FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "run_file_writer"
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
    written = orjson.loads(real_run(tmp_path / "run", name))
    before = orjson.loads((WRITER_FIXTURES / f"{name}.json").read_bytes())
    assert key_paths(written) == key_paths(before)
    assert list(written) == list(before)  # and in the same order
