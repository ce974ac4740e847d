"""run.json read back through its typed model (results/run_record.py): the model's parts
are the RunSpec's, what it reads is what the writer wrote, and a file of the previous
release (tests/fixtures/run_file_main, written by main's code before the model existed)
still reads, and still resumes with the real CLI."""

from __future__ import annotations

import dataclasses
import json
import shutil
from pathlib import Path

import msgspec
import orjson
import pytest

from loadgen.config.args import spec_from_argv
from loadgen.config.spec import PARTS, RUN_LEVEL, RunSpec
from loadgen.results.point import ResultFileError
from loadgen.results.results_dir import settings_of
from loadgen.results.run_record import (
    NOT_WRITTEN,
    RunLevelSettings,
    RunSettings,
    decode_run,
    settings_from_flat,
)
from tests.support.procs import one_error_line, run_loadgen

FIXTURE = Path(__file__).resolve().parents[1] / "fixtures" / "run_file_main"
# The flags the fixture's run was started with (an embedded simulator, killed at conc 2).
FIXTURE_FLAGS = ["--sim", "--conc", "1,2", "--isl", "32", "--osl", "400", "--encoder", "raw"]
FIXTURE_FLAGS += ["--no-progress", "--prompts-per-conc", "2", "--warmup-per-conc", "0"]


def _json(value: object) -> object:
    return orjson.loads(orjson.dumps(value))


def test_the_model_reads_each_part_as_the_run_spec_part_itself() -> None:
    """No second list of settings: each part of run.json's settings is read back as the
    RunSpec part's own type, so a field added to a part (a new option) is written and read
    back with no edit in results/, and cannot be left out of the read-back."""
    fields = {f.name: f.type for f in msgspec.structs.fields(RunSettings)}
    assert fields == {**PARTS, "run": RunLevelSettings}
    assert set(RunLevelSettings.__struct_fields__) == set(RUN_LEVEL)
    spec = RunSpec.flat(conc=(1,), isl=8, osl=8, sim=True)
    every = {f.name for part in PARTS.values() for f in dataclasses.fields(part)}
    assert set(settings_of(spec)) == (every - NOT_WRITTEN) | set(RUN_LEVEL)


def test_a_setting_left_out_reads_as_the_run_spec_default() -> None:
    """An older run.json without a setting reads as a run that left it unset."""
    spec = RunSpec.flat(conc=(1,), isl=8, osl=8, sim=True)
    read = settings_from_flat({"conc": [1], "isl": 8, "osl": 8, "sim": True})
    assert _json(read.flat()) == settings_of(spec)


def test_what_is_written_is_what_is_read() -> None:
    argv = ["--base-url", "http://u:pw@127.0.0.1:9", "--conc", "2,4", "--isl", "64"]
    argv += ["--osl", "8", "--header", "X-Token:secret", "--slo", "ttft=300", "--seed", "7"]
    argv += ["--request-rate", "3", "--percentiles", "50,99", "--turns", "2"]
    spec = spec_from_argv(argv, env={})
    written = settings_of(spec)
    read = settings_from_flat(written)
    assert _json(read.flat()) == written
    assert read.load.conc == (2, 4) and read.load.request_rate == 3.0
    assert read.scoring.slos_ms == {"ttft": 300.0} and read.run.seed == 7
    assert read.target.headers == (("X-Token", "***"),) and read.session.turns == "2"


def test_a_run_file_of_the_previous_release_reads_back_typed() -> None:
    run = decode_run((FIXTURE / "run.json").read_bytes(), FIXTURE / "run.json")
    on_disk = json.loads((FIXTURE / "run.json").read_text())
    flat: dict[str, object] = orjson.loads(orjson.dumps(run.settings.flat()))
    written: dict[str, object] = on_disk["settings"]
    assert {name: flat[name] for name in written} == written  # every setting, as written
    added = set(flat) - set(written)  # settings newer than the file read as their defaults
    defaults = {
        field.name: field.default_factory()
        if field.default_factory is not dataclasses.MISSING
        else field.default
        for part in PARTS.values()
        for field in dataclasses.fields(part)
    }
    assert {name: flat[name] for name in added} == _json({name: defaults[name] for name in added})
    assert run.settings.workload.isl == 32 and run.settings.load.conc == (1, 2)
    assert [(p.conc, p.complete) for p in run.points] == [(1, True), (2, False)]
    first = run.points[0]
    assert first.clock is not None and first.clock.start_mono_ns > 0
    assert first.server_before is not None and first.server_before.samples
    assert _json(first.facts().to_json()) == {
        k: on_disk["points"][0][k] for k in ("clock", "server_before", "server_after")
    }
    assert run.server is not None and run.server.model == on_disk["server"]["model"]
    assert run.server.stream_interval is None  # not recorded before this model
    assert [a.run_id for a in run.attempts_so_far()] == [on_disk["run_id"]]


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (lambda r: r["settings"].update(isl="many"), "isl"),
        (lambda r: r["points"][0].update(conc=None), "conc"),
        (lambda r: r["points"][0]["clock"].update(start_mono_ns="x"), "start_mono_ns"),
        (lambda r: r.pop("settings"), "settings"),
    ],
)
def test_a_damaged_run_file_is_one_line_naming_the_field(
    tmp_path: Path, change: object, field: str
) -> None:
    run = json.loads((FIXTURE / "run.json").read_text())
    change(run)  # type: ignore[operator]
    path = tmp_path / "run.json"
    path.write_text(json.dumps(run))
    with pytest.raises(ResultFileError, match=f"{path}: .*{field}.*not a run.json"):
        decode_run(path.read_bytes(), path)


def test_settings_of_a_wrong_type_are_refused_not_coerced() -> None:
    with pytest.raises(msgspec.ValidationError, match="conc"):
        settings_from_flat({"conc": "1,2", "isl": 8, "osl": 8})


def test_a_run_of_the_previous_release_resumes(tmp_path: Path) -> None:
    """The real CLI resumes the fixture: conc 1 kept byte for byte, conc 2 measured again
    (its stopped files set aside), and the earlier attempt kept in run.json."""
    results = tmp_path / "run"
    shutil.copytree(FIXTURE, results)
    kept = (results / "conc_1.json").read_bytes()
    earlier = json.loads((results / "run.json").read_text())
    resumed = run_loadgen([*FIXTURE_FLAGS, "--resume", str(results)])
    assert resumed.returncode == 0, resumed.stderr
    assert f"resuming run {earlier['run_id']}" in resumed.stderr
    assert (results / "conc_1.json").read_bytes() == kept
    run = json.loads((results / "run.json").read_text())
    assert [(p["conc"], p["complete"]) for p in run["points"]] == [(1, True), (2, True)]
    assert run["points"][0]["clock"] == earlier["points"][0]["clock"]  # facts carried over
    assert [a["run_id"] for a in run["attempts"]] == [earlier["run_id"], run["run_id"]]
    assert (results / "incomplete" / earlier["run_id"] / "conc_2.json").is_file()
    different = run_loadgen([*FIXTURE_FLAGS, "--seed", "3", "--resume", str(results)])
    assert different.returncode == 2
    assert "seed 3 (was 0)" in one_error_line(different.stderr)
