"""`--aiperf-artifacts DIR` checked before anything is measured, kept whole across
`--resume`, and never mixed with an earlier run's files. Real CLI processes, the real
embedded simulator, real files."""

from __future__ import annotations

import shutil
from pathlib import Path

import orjson

from tests.support.procs import run_loadgen

RUN = [
    *("--sim", "--sim-args", "--step-fixed-ms 1 --spin-us 0"),
    *("--isl", "32", "--osl", "8", "--prompts-per-conc", "4", "--warmup-per-conc", "0"),
    *("--encoder", "raw", "--no-progress"),
]
FILES = ("profile_export.jsonl", "profile_export_aiperf.json", "server_metrics_export.json")


def test_a_file_is_refused_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("mine\n")
    done = run_loadgen(
        [
            *(*RUN, "--conc", "1", "--results", str(tmp_path / "r")),
            *("--aiperf-artifacts", str(tmp_path / "a-file")),
        ]
    )
    assert done.returncode == 2, done.stderr
    assert f"--aiperf-artifacts {tmp_path / 'a-file'}: not a directory" in done.stderr
    assert "Traceback" not in done.stderr
    assert (tmp_path / "a-file").read_text() == "mine\n"
    assert not list((tmp_path / "r").glob("conc_*.json"))  # nothing measured


def test_a_directory_it_cannot_create_is_refused_before_the_run(tmp_path: Path) -> None:
    (tmp_path / "a-file").write_text("mine\n")
    where = tmp_path / "a-file" / "artifacts"
    done = run_loadgen(
        [*RUN, "--conc", "1", "--results", str(tmp_path / "r"), "--aiperf-artifacts", str(where)]
    )
    assert done.returncode == 2, done.stderr
    assert f"--aiperf-artifacts {where}: cannot create or write in it" in done.stderr
    assert not list((tmp_path / "r").glob("conc_*.json"))


def test_a_reused_directory_is_refused_or_overwritten(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    first = run_loadgen(
        [
            *RUN,
            "--conc",
            "1",
            "--results",
            str(tmp_path / "r1"),
            "--aiperf-artifacts",
            str(artifacts),
        ]
    )
    assert first.returncode == 0, first.stderr
    before = {name: (artifacts / name).read_bytes() for name in FILES}
    again = [*RUN, "--conc", "1", "--results", str(tmp_path / "r2")]
    refused = run_loadgen([*again, "--aiperf-artifacts", str(artifacts)])
    assert refused.returncode == 2, refused.stderr
    assert "already holds an earlier run's artifacts (profile_export.jsonl" in refused.stderr
    assert {name: (artifacts / name).read_bytes() for name in FILES} == before
    assert not (tmp_path / "r2" / "conc_1.json").exists()
    replaced = run_loadgen([*again, "--aiperf-artifacts", str(artifacts), "--overwrite"])
    assert replaced.returncode == 0, replaced.stderr
    run_id = orjson.loads((tmp_path / "r2" / "run.json").read_bytes())["run_id"]
    aggregate = orjson.loads((artifacts / "profile_export_aiperf.json").read_bytes())
    assert aggregate["metadata"]["run_id"] == run_id
    assert orjson.loads(before["profile_export_aiperf.json"])["metadata"]["run_id"] != run_id


def test_resume_writes_the_kept_points_missing_artifacts(tmp_path: Path) -> None:
    artifacts, results = tmp_path / "artifacts", tmp_path / "r"
    blocker = artifacts / "conc_1" / "profile_export.jsonl"
    blocker.mkdir(parents=True)  # conc 1's records file cannot be written
    sweep = [*RUN, "--conc", "1,2", "--aiperf-artifacts", str(artifacts)]
    failed = run_loadgen([*sweep, "--results", str(results)])
    assert failed.returncode != 0, failed.stderr
    assert f"--resume {results}" in failed.stderr, failed.stderr
    assert (results / "conc_1.json").is_file()
    shutil.rmtree(blocker)
    resumed = run_loadgen([*sweep, "--resume", str(results)])
    assert resumed.returncode == 0, resumed.stderr
    assert "conc 1: kept from the run resumed; its AIPerf artifacts were missing" in (
        resumed.stderr
    )
    for conc in (1, 2):
        for name in FILES:
            assert (artifacts / f"conc_{conc}" / name).is_file(), (conc, name)
    lines = (artifacts / "conc_1" / "profile_export.jsonl").read_bytes().splitlines()
    records = (results / "requests_conc_1.jsonl").read_bytes().splitlines()
    assert len(lines) == len(records) == 4  # the kept point's measured requests


def test_each_find_max_probe_writes_its_own_artifacts(tmp_path: Path) -> None:
    artifacts = tmp_path / "artifacts"
    done = run_loadgen(
        [
            *(*RUN, "--conc", "1..2:+1", "--find-max", "conc", "--slo", "ttft:p99=60000ms"),
            *("--results", str(tmp_path / "r"), "--aiperf-artifacts", str(artifacts)),
        ]
    )
    assert done.returncode == 0, done.stderr
    probes = orjson.loads((tmp_path / "r" / "capacity.json").read_bytes())["probes"]
    assert probes and not (artifacts / "profile_export_aiperf.json").exists()
    for probe in probes:
        aggregate = artifacts / probe["results"] / "profile_export_aiperf.json"
        assert orjson.loads(aggregate.read_bytes())["metadata"]["concurrency"] == probe["load"]


def test_sweep_file_lanes_given_one_directory_write_their_own(tmp_path: Path) -> None:
    """Lanes sharing --aiperf-artifacts overwrote each other's one-point files; with the
    reuse check the second lane would be refused. Each now writes DIR/<lane name>."""
    (tmp_path / "sweep.yaml").write_text(
        "sim: true\nsim-args: '--step-fixed-ms 1 --spin-us 0'\nconc: 1\n"
        "isl: 32\nosl: 8\nprompts-per-conc: 4\nwarmup-per-conc: 0\nencoder: raw\n"
        "lanes: [{name: a}, {name: b, osl: 4}]\n"
    )
    artifacts = tmp_path / "artifacts"
    done = run_loadgen(
        [
            *("--config", str(tmp_path / "sweep.yaml"), "--results", str(tmp_path / "tree")),
            *("--aiperf-artifacts", str(artifacts), "--no-progress"),
        ]
    )
    assert done.returncode == 0, done.stderr
    for lane, osl in (("a", 8), ("b", 4)):
        lines = (artifacts / lane / "profile_export.jsonl").read_bytes().splitlines()
        assert len(lines) == 4
        osls = {orjson.loads(line)["metrics"]["output_sequence_length"]["value"] for line in lines}
        assert osls == {osl}, (lane, osls)
