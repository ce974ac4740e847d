"""--shard I/N and `loadgen merge`: shards of one run against one real simulator.

The simulator draws each request's tokens and acceptance from the request's own seed
(tests/scale/test_workers.py), so the merged shards must reproduce the unsharded run's
requests, counts and per-request chunk token counts exactly.
"""

from __future__ import annotations

import dataclasses
import shutil
import subprocess
import sys
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.errors import UsageError
from loadgen.results.jsonl import JsonlSink, read_jsonl
from loadgen.results.store import ResultsDir
from loadgen.run.embedded_sim import embedded_simulator
from loadgen.run.sweep import SweepOptions, sweep_points
from loadgen.scale.merge import merge_results
from loadgen.scale.shard_views import rtt_skew_line
from tests.support.coordinator import SAME_AS_ONE, point

SIM = ("--step-fixed-ms", "3", "--decode-token-us", "20", "--prefill-token-us", "2", "--seed", "5")
CONC = (1, 2, 4)  # conc 1: shard 1 holds no slot, and its sweep would run ahead


@pytest.fixture
async def sim_url(tmp_path: Path) -> AsyncIterator[str]:
    async with embedded_simulator(SIM, log_path=tmp_path / "sim.log") as url:
        yield url


def argv(url: str, results: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "loadgen",
        "--base-url",
        url,
        "--conc",
        "1,2,4",
        "--isl",
        "64",
        "--osl",
        "40",
        "--prompts-per-conc",
        "3",
        "--warmup-per-conc",
        "1",
        "--no-progress",
        "--results",
        str(results),
        *extra,
    ]


def run_shards(url: str, tmp: Path, *extra: str) -> list[Path]:
    dirs = [tmp / f"shard{i}" for i in range(2)]
    shards = [
        subprocess.Popen(
            argv(url, d, "--shard", f"{i}/2", *extra),
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        for i, d in enumerate(dirs)
    ]
    for shard in shards:
        _, err = shard.communicate(timeout=120)
        assert shard.returncode == 0, err
    return dirs


def merge_cli(dirs: list[Path], out: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "loadgen", "merge", *map(str, dirs), "--results", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
    )


def loadgen_cli(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, timeout=60)


async def test_two_synced_shards_merge_into_the_unsharded_run(
    tmp_path: Path, sim_url: str, tokenizer: Tokenizer
) -> None:
    dirs = run_shards(sim_url, tmp_path, "--shard-sync", str(tmp_path / "sync"))
    merged = merge_cli(dirs, tmp_path / "merged")
    assert merged.returncode == 0, merged.stderr
    spec = RunSpec.flat(
        conc=CONC,
        isl=64,
        osl=40,
        prompts_per_conc=3,
        warmup_per_conc=1,
        base_url=sim_url,
        results_dir=tmp_path / "one",
        progress=False,
    )
    await sweep_points(spec, SweepOptions(tokenizer=tokenizer))
    for conc in CONC:
        whole, whole_chunks = point(tmp_path / "one", conc)
        result, chunks = point(tmp_path / "merged", conc)
        for key in (*SAME_AS_ONE, "http_client"):
            assert result[key] == whole[key], (conc, key)
        assert chunks == whole_chunks
        assert result["shards_merged"] == 2 and result["shard"] is None
        assert result["clock_alignment_uncertainty_ms"] == 0.0  # one machine
        assert result["complete"] is True and result["server_acceptance_length"] is not None
        # every producer writes every field of the model: the merge once forgot one
        assert set(result) == set(whole), set(result) ^ set(whole)
        assert "server_metrics_by_url" in result
        own = [point(d, conc)[0] for d in dirs]
        assert [r["shard"] for r in own] == ["0/2", "1/2"]
        assert sum(r["num_prompts"] for r in own) == result["num_prompts"]
        check_exact(tmp_path / "merged", result, conc)
    run = orjson.loads((tmp_path / "merged" / "run.json").read_bytes())
    assert [m["shard"] for m in run["merged_from"]] == [0, 1] and run["refused"] == []
    check_shard_views(dirs, tmp_path / "merged", merged.stderr)
    check_alignment_across_machines(dirs, tmp_path)


def check_shard_views(dirs: list[Path], merged: Path, stderr: str) -> None:
    """Each shard's round trip (its own preflight's, measured against the real simulator)
    and clock state (its own first point's) are in the merge's run.json, shard by shard,
    and the merge warns exactly when the rule says these values differ too much."""
    record = ResultsDir(merged).read_run()
    assert [v.index for v in record.shards] == [0, 1]
    for view, directory in zip(record.shards, dirs, strict=True):
        own = ResultsDir(directory).read_run()
        assert own.server is not None and own.server.rtt_ms is not None
        assert own.server.rtt_ms > 0
        clock = own.points[0].clock
        assert clock is not None
        assert view.rtt_ms == own.server.rtt_ms
        assert (view.boot_id, view.synced, view.esterror_us) == (
            clock.boot_id,
            clock.synced,
            clock.esterror_us,
        )
    ttfts = [point(merged, conc)[0]["median_ttft_ms"] for conc in CONC]
    expected = rtt_skew_line(record.shards, ttfts)
    assert (expected is not None) == ("round trips to the server differ" in stderr), stderr


def check_exact(results: Path, result: dict[str, Any], conc: int) -> None:
    records = [r for r in read_jsonl(results / f"requests_conc_{conc}.jsonl") if r.ok]
    tpot = np.array(
        [(r.chunk_ns[-1] - r.chunk_ns[0]) / 1e6 / (r.output_tokens - 1) for r in records]
    )
    for p in (50, 90, 99):
        assert result[f"p{p}_tpot_ms"] == pytest.approx(float(np.percentile(tpot, p)), rel=1e-12)


def pretend_other_machine(source: Path, target: Path, shift_ns: int, esterror_us: int) -> None:
    """Shard as another machine would have written it: its monotonic clock started
    elsewhere (every *_ns shifted, wall clock readings unchanged), another boot id."""
    shutil.copytree(source, target)
    for jsonl in target.glob("requests_conc_*.jsonl"):
        records = read_jsonl(jsonl)
        jsonl.unlink()
        with JsonlSink(jsonl) as sink:
            for r in records:
                sink.write(
                    dataclasses.replace(
                        r,
                        scheduled_ns=r.scheduled_ns + shift_ns,
                        start_ns=r.start_ns + shift_ns,
                        end_ns=r.end_ns + shift_ns,
                        chunk_ns=tuple(t + shift_ns for t in r.chunk_ns),
                        clock_mono_ns=r.clock_mono_ns + shift_ns,
                    )
                )
    run = orjson.loads((target / "run.json").read_bytes())
    for entry in run["points"]:
        entry["clock"].update(
            boot_id=f"machine-{target.name}", synced=True, esterror_us=esterror_us
        )
    (target / "run.json").write_bytes(orjson.dumps(run))


def check_alignment_across_machines(dirs: list[Path], tmp: Path) -> None:
    other = tmp / "other"
    pretend_other_machine(dirs[0], tmp / "same", 0, 40)
    pretend_other_machine(dirs[1], other, -987_654_321_000, 60)
    outcome = merge_results([tmp / "same", other], tmp / "aligned")
    assert outcome.exit_code == 0, outcome.refused
    for conc in CONC:
        local, _ = point(tmp / "merged", conc)
        aligned, _ = point(tmp / "aligned", conc)
        # 40 + 60 us of NTP error estimate, plus the pairing brackets (< 1 ms)
        uncertainty_ms = aligned["clock_alignment_uncertainty_ms"]
        assert 0.1 <= uncertainty_ms < 1.1
        # Through the wall clock, each process's pairing error (tens of ns) moves its
        # records against the others': within the stated uncertainty, nowhere near it.
        assert abs(aligned["duration"] - local["duration"]) * 1e3 <= uncertainty_ms
        for key in ("output_throughput", "steady_output_throughput"):
            assert aligned[key] == pytest.approx(local[key], rel=1e-5), key
        for key in ("num_prompts", "total_output_tokens", "p99_ttft_ms", "mean_itl_ms"):
            assert aligned[key] == local[key], key  # within one process: untouched
    run = orjson.loads((other / "run.json").read_bytes())
    for entry in run["points"]:
        entry["clock"]["synced"] = False
    (other / "run.json").write_bytes(orjson.dumps(run))
    unsynced = merge_results([tmp / "same", other], tmp / "unsynced")
    assert unsynced.points[0].client.clock_alignment_uncertainty_ms is None
    assert "not NTP-synchronized" in unsynced.warnings[0] and unsynced.exit_code == 0


async def test_merge_refuses_shards_that_did_not_overlap(
    tmp_path: Path, sim_url: str, tokenizer: Tokenizer
) -> None:
    base = RunSpec.flat(
        conc=(2,),
        isl=64,
        osl=24,
        prompts_per_conc=2,
        warmup_per_conc=0,
        base_url=sim_url,
        progress=False,
        shard_count=2,
    )
    for index in (0, 1):  # one after the other
        await sweep_points(
            base.with_(shard_index=index, results_dir=tmp_path / f"s{index}"),
            SweepOptions(tokenizer=tokenizer),
        )
    done = merge_cli([tmp_path / "s0", tmp_path / "s1"], tmp_path / "merged")
    assert done.returncode == 2
    assert "refused conc 2: the shards did not overlap in time" in done.stderr
    assert not (tmp_path / "merged" / "conc_2.json").exists()
    run = orjson.loads((tmp_path / "merged" / "run.json").read_bytes())
    assert run["points"] == [] and "did not overlap" in run["refused"][0]
    with pytest.raises(UsageError, match=r"each shard 0\.\.1 of 2 once"):
        merge_results([tmp_path / "s0"], tmp_path / "m1")
    with pytest.raises(UsageError, match="already a merge"):
        merge_results([tmp_path / "merged", tmp_path / "s1"], tmp_path / "m2")
    run = orjson.loads((tmp_path / "s1" / "run.json").read_bytes())
    run["settings"]["osl"] = 25
    (tmp_path / "s1" / "run.json").write_bytes(orjson.dumps(run))
    with pytest.raises(UsageError, match=r"settings differ .*\(osl\)"):
        merge_results([tmp_path / "s0", tmp_path / "s1"], tmp_path / "m3")


def test_merge_usage_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    done = merge_cli([tmp_path / "nothing"], tmp_path / "out")
    assert done.returncode == 2
    assert done.stderr.count("\n") == 1 and "no readable run.json" in done.stderr


async def test_merge_says_it_carries_no_energy_and_shards_refuse_to_sample_it(
    tmp_path: Path, sim_url: str
) -> None:
    """Each shard sampling every GPU divided all of their energy by its own tokens (J/token
    x N), and merge dropped energy without a word: now --shard refuses --gpu-metrics, and
    merge says so for shards an older loadgen let sample."""
    refused = loadgen_cli(
        argv(sim_url, tmp_path / "x", "--shard", "0/2", "--gpu-metrics", sim_url + "/gpu/metrics")
    )
    assert refused.returncode == 2 and refused.stderr.count("\n") == 1
    assert "--gpu-metrics/--gpu-power-csv with --shard: not supported" in refused.stderr
    dirs = run_shards(sim_url, tmp_path, "--shard-sync", str(tmp_path / "sync"))
    for d in dirs:  # as an older loadgen wrote them
        run = orjson.loads((d / "run.json").read_bytes())
        run["settings"]["gpu_metrics"] = [sim_url + "/gpu/metrics"]
        (d / "run.json").write_bytes(orjson.dumps(run))
    merged = merge_cli(dirs, tmp_path / "merged")
    assert merged.returncode == 0, merged.stderr
    assert "the merged points carry no energy figures" in merged.stderr
    assert "power_valid" not in orjson.loads((tmp_path / "merged" / "conc_2.json").read_bytes())
