"""--workers: N client processes against the real simulator give the single-process point.

Determinism: the simulator draws each request's tokens and MTP acceptance from the
request's own seed (sent by loadgen, drawn from --seed), never from batching or timing,
so the same request gets the same chunk token counts whichever process sent it. Counts,
token totals and every request's chunk token list must therefore be identical with 1 or 2
workers. Latencies are not: they are timings on a shared 2-core machine.

Noise note (the tolerance below). With --step-fixed-ms 12 the simulator's decode step at
conc 4 takes ~12.3 ms, and each chunk gap is one step, so the median chunk gap (ITL) and
the median TPOT (= step / tokens per chunk) are set by the simulator's step clock. What
can move them is scheduling on this machine: the simulator's and client processes' wake-up
delays (~0.1-2 ms when the cores are shared with other jobs). Medians over ~800 gaps move by
far less than that; 15% of a 12 ms median is 1.8 ms, a bound no systematic error of the
worker path (records from the wrong request, clocks not shared, per-worker stats
averaged) could stay within, while scheduling noise does.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson
import pytest
from prometheus_client import CollectorRegistry
from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.records import ErrorKind, RequestRecord
from loadgen.results.jsonl import read_jsonl
from loadgen.run.shares import Share, requests_in
from loadgen.run.sweep import SweepOptions
from loadgen.scale.pool_driver import choose_workers
from loadgen.scale.sweep import run_sweep
from loadgen.sinks.prometheus import LoadgenMetrics, MetricsObserver

SIM = (
    "--step-fixed-ms",
    "12",
    "--decode-token-us",
    "20",
    "--prefill-token-us",
    "2",
    "--spin-us",
    "0",
    "--seed",
    "11",
)
NOISE = 0.15  # module doc


def spec(tmp: Path, workers: int, **changes: Any) -> RunSpec:
    values: dict[str, Any] = dict(
        conc=(3, 4),
        isl=64,
        osl=48,
        prompts_per_conc=4,
        warmup_per_conc=1,
        sim=True,
        sim_args=SIM,
        results_dir=tmp,
        progress=False,
        workers=workers,
    )
    values.update(changes)
    return RunSpec.flat(**values)


def load(results: Path, conc: int) -> tuple[dict[str, Any], list[RequestRecord]]:
    result = orjson.loads((results / f"conc_{conc}.json").read_bytes())
    return result, read_jsonl(results / f"requests_conc_{conc}.jsonl")


def assert_exact_percentiles(result: dict[str, Any], records: list[RequestRecord]) -> None:
    """The published figures are numpy's over the concatenated raw values of all processes."""
    done = [r for r in records if r.ok and r.chunk_ns]
    ttft = np.array([(r.chunk_ns[0] - r.start_ns) / 1e6 for r in done])
    e2el = np.array([(r.chunk_ns[-1] - r.start_ns) / 1e6 for r in done])
    itl = np.concatenate([np.diff(np.array(r.chunk_ns)) / 1e6 for r in done])
    for name, values in (("ttft", ttft), ("e2el", e2el), ("itl", itl)):
        for p in (50, 90, 99, 99.9):
            key = f"p{p:g}_{name}_ms"
            assert result[key] == pytest.approx(float(np.percentile(values, p)), rel=1e-12), key
        assert result[f"mean_{name}_ms"] == pytest.approx(float(values.mean()), rel=1e-12)


async def test_one_and_two_workers_measure_the_same_point(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    registry = CollectorRegistry()
    observer = MetricsObserver(
        LoadgenMetrics(registry), model="m", endpoint="completions", points=2, spec_tokens=None
    )
    one = await run_sweep(spec(tmp_path / "one", 1), SweepOptions(tokenizer=tokenizer))
    two = await run_sweep(
        spec(tmp_path / "two", 2), SweepOptions(tokenizer=tokenizer, observer=observer)
    )
    assert one.exit_code == two.exit_code == 0
    for conc in (3, 4):
        r1, recs1 = load(one.results_dir, conc)
        r2, recs2 = load(two.results_dir, conc)
        for key in (
            "num_prompts",
            "completed",
            "failed",
            "total_input_tokens",
            "total_output_tokens",
            "total_chunks",
            "planned_requests",
            "warmup_requests",
            "stream_acceptance_length",
        ):
            assert r1[key] == r2[key], key
        # the same requests, each with the same chunk token counts (module doc)
        assert {r.request_id: r.chunk_tokens for r in recs1} == {
            r.request_id: r.chunk_tokens for r in recs2
        }
        for key in ("median_itl_ms", "median_tpot_ms"):
            assert r2[key] == pytest.approx(r1[key], rel=NOISE), key
        assert_exact_percentiles(r2, recs2)
        check_worker_health(r2, recs2, conc)
    check_live_metrics(registry, two.results_dir)


def check_worker_health(result: dict[str, Any], records: list[RequestRecord], conc: int) -> None:
    processes = {p["process"]: p for p in result["client_processes"]}
    assert set(processes) == {"parent", "shard 0/1 worker 0/2", "shard 0/1 worker 1/2"}
    for worker in (0, 1):
        share = Share(worker=worker, workers=2)
        mine = [r for r in records if share.owner(conc)(r.request_id)]
        entry = processes[f"shard 0/1 worker {worker}/2"]
        assert entry["requests"] == len(mine) == requests_in(conc * 4, conc, share.slots(conc))
        assert entry["chunks"] == sum(len(r.chunk_ns) for r in mine)
        assert entry["loop_lag_samples"] > 0 and entry["cpu_seconds"] > 0
    assert result["client_cpu_seconds"] == pytest.approx(
        sum(p["cpu_seconds"] for p in processes.values())
    )
    assert result["client_loop_lag_p99_ms"] == max(
        p["loop_lag_p99_ms"] for p in processes.values() if p["loop_lag_samples"]
    )
    # one machine: both workers' records share a clock; each worker read its pair at the
    # point's start, before its first send (an ordering, not a window)
    pairs = {r.clock_mono_ns for r in records}
    assert len(pairs) == 2
    for pair in pairs:
        assert pair <= min(r.start_ns for r in records if r.clock_mono_ns == pair)
    assert result["clock_alignment_uncertainty_ms"] == 0.0 and result["shard"] is None


def check_live_metrics(registry: CollectorRegistry, results: Path) -> None:
    """The parent's one registry holds every worker's requests and loop-lag samples."""
    completed = sum(load(results, c)[0]["completed"] for c in (3, 4))
    gaps = sum(
        load(results, c)[0]["total_chunks"] - load(results, c)[0]["completed"] for c in (3, 4)
    )
    ok = sum(
        registry.get_sample_value(
            "loadgen_requests_total",
            {"model_name": "m", "endpoint": "completions", "conc": str(c), "outcome": "ok"},
        )
        or 0
        for c in (3, 4)
    )
    itl = sum(
        registry.get_sample_value(
            "loadgen_inter_chunk_latency_seconds_count",
            {"model_name": "m", "endpoint": "completions", "conc": str(c)},
        )
        or 0
        for c in (3, 4)
    )
    lag = registry.get_sample_value("loadgen_event_loop_lag_seconds_count", {})
    samples = sum(load(results, c)[0]["client_loop_lag_samples"] for c in (3, 4))
    assert ok == completed and itl == gaps
    assert lag == samples  # every worker's samples, once
    assert (
        registry.get_sample_value(
            "loadgen_requests_in_flight", {"model_name": "m", "endpoint": "completions"}
        )
        == 0
    )


def test_slots_partition_the_point_exactly() -> None:
    for conc in (1, 2, 5, 7, 64):
        owners: dict[int, str] = {}
        for shard in range(3):
            for worker in range(2):
                for slot in Share(shard, 3, worker, 2).slots(conc):
                    assert slot not in owners
                    owners[slot] = f"{shard}/{worker}"
        assert sorted(owners) == list(range(conc))
        share = Share(1, 3, 1, 2)
        total = conc * 4 + 3
        assert requests_in(total, conc, share.slots(conc)) == sum(
            share.owner(conc)(i) for i in range(total)
        )


def test_auto_workers_from_cores_and_streams() -> None:
    base = RunSpec.flat(conc=(4, 512), isl=64, osl=8, base_url="http://127.0.0.1:9", workers=None)
    assert choose_workers(base, 2)[0] == 1  # the parent needs the other core
    count, why = choose_workers(base, 16)
    assert count == 4 and "512 streams" in why  # 512 / 128 per worker
    assert choose_workers(RunSpec.flat(conc=(64,), isl=64, osl=8, sim=True), 16)[0] == 1
    sharded = RunSpec.flat(conc=(512,), isl=64, osl=8, base_url="http://x:1", shard_count=4)
    assert choose_workers(sharded, 16)[0] == 1  # 128 streams in this shard


def worker_pids(parent: int) -> list[int]:
    pids = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
            cmdline = (stat.parent / "cmdline").read_bytes()
        except (OSError, IndexError):
            continue
        if int(fields[1]) == parent and b"loadgen.scale.worker_process" in cmdline:
            pids.append(int(stat.parent.name))
    return sorted(pids)


def start_run(tmp_path: Path) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "loadgen",
            "--sim",
            "--conc",
            "4",
            "--isl",
            "48",
            "--osl",
            "400",
            "--prompts-per-conc",
            "20",
            "--warmup-per-conc",
            "0",
            "--workers",
            "2",
            "--results",
            str(tmp_path),
            "--no-progress",
            "--sim-args",
            "--step-fixed-ms 4 --spin-us 0",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def wait_for_records(path: Path, count: int, process: subprocess.Popen[str]) -> None:
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline and process.poll() is None:
        if path.exists() and path.read_bytes().count(b"\n") >= count:
            return
        time.sleep(0.05)
    raise AssertionError(f"fewer than {count} records within 60 s")


@pytest.mark.parametrize("how", ["sigint", "kill_worker"])
def test_stopping_keeps_every_finished_record(tmp_path: Path, how: str) -> None:
    """Ctrl-C stops every worker; a killed worker is reported; nothing measured is lost."""
    jsonl = tmp_path / "requests_conc_4.jsonl"
    process = start_run(tmp_path)
    try:
        wait_for_records(jsonl, 4, process)
        time.sleep(0.2)  # requests in flight on both workers
        pids = worker_pids(process.pid)
        assert len(pids) == 2, pids
        if how == "sigint":
            process.send_signal(signal.SIGINT)
        else:
            subprocess.run(["kill", "-KILL", str(pids[1])], check=True)
        _, stderr = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    records = read_jsonl(jsonl)
    result = orjson.loads((tmp_path / "conc_4.json").read_bytes())
    run = orjson.loads((tmp_path / "run.json").read_bytes())
    assert result["complete"] is False and run["stop_reason"] == result["stop_reason"]
    assert result["incomplete_reason"] == result["stop_detail"]  # one line, two names
    assert result["num_prompts"] == len(records) and jsonl.read_bytes().endswith(b"\n")
    cancelled = [r for r in records if r.error is ErrorKind.CANCELLED]
    assert all(sum(r.chunk_tokens) < 400 for r in cancelled)
    if how == "sigint":
        assert process.returncode == 130, stderr
        assert len(cancelled) == 4  # every slot of both workers was in flight
        assert result["stop_reason"] == "interrupted" and run["interrupted"] is True
    else:
        assert process.returncode == 1, stderr
        assert "worker 1/2" in stderr and "status -9" in stderr
        assert result["stop_reason"] == "worker_died" and run["interrupted"] is False
        assert "exited with status -9" in result["incomplete_reason"]
        assert len(cancelled) == 2  # the survivor's two slots, stopped
        assert any(p["process"].endswith("(lost)") for p in result["client_processes"])
    assert not [p for p in pids if Path(f"/proc/{p}").exists()], "a worker outlived the run"
