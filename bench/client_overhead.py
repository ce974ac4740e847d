"""How much does the client itself distort what it measures? (issue 4, "Performance")

Runs loadgen against the simulator, which writes its ground truth (`--trace`: per chunk
the step's intended time and the perf_counter_ns read right after the socket write), with
the simulator and the client each pinned to its own core, at conc 64, 256 and 512. Both
clocks are CLOCK_MONOTONIC, so per chunk:

  receive lag   = client arrival stamp - simulator send time (its clock read just after
                  the socket write); the native client's stamps on plain http are the
                  kernel's receive stamps (`arrival stamps: kernel`), so its lag is a few
                  us negative: the kernel stamps the packet inside the simulator's write
  TTFT error    = client TTFT - true TTFT, matched per request, the truth being request
                  written -> first chunk sent (the client's clock starts at its write, so
                  this is the first chunk's receive lag)
  send cost     = reported separately: request written (client clock) -> simulator
                  handler start, i.e. the client's write, the kernel, and the simulator
                  parsing the request (a real delay a user sees, part of real TTFT)
  ITL error     = client chunk gap - true chunk gap
  collapsed     = share of client chunk gaps under 50 us (chunks read together); and the
                  share the client collapsed itself: under 50 us at the client though the
                  simulator sent them >= 1 ms apart (a late simulator collapses gaps too)
  chunks/s      = token-bearing events ingested per second over the point
  client CPU    = the client process's CPU time per chunk and its share of one core

With `--workers N` the client is N worker processes (plus the parent collecting their
records): the same figures per worker and in total, and a projection of how many
streams one core takes (measured CPU per chunk x this point's chunk rate per stream).
All client processes inherit the client core's pinning unless --cpu-affinity spreads
the workers; on a 2-core machine (one core for the simulator) the workers then share
one core, which measures the per-worker cost, not the scaling.

`--http-client native,aiohttp --runs 3` measures both streaming clients in the same
sitting, alternating (native, aiohttp, native, ...), each run against a fresh simulator,
then prints the median of each figure over the runs and its spread (min..max).

Then the peak RSS of building a full `--conc 4..512 --isl 8192 --osl 1024` sweep's
prompts (one point at a time, as the runner does), in a fresh process.

    .venv/bin/python bench/client_overhead.py            # everything
    .venv/bin/python bench/client_overhead.py --skip-rss --conc 64
    .venv/bin/python bench/client_overhead.py --skip-rss --conc 256,512 \
        --http-client native,aiohttp --runs 3
    .venv/bin/python bench/client_overhead.py --skip-rss --conc 512 --workers 2

Figures on a shared 2-core machine are noisy; the method is what matters.
"""

from __future__ import annotations

import argparse
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from bench.aiohttp_client import AIOHTTP_STREAMS, check_private_api
from loadgen.config.parsers import parse_cpu_list
from loadgen.config.spec import RunSpec
from loadgen.records import RequestRecord
from loadgen.results.jsonl import read_jsonl
from loadgen.run.backend import http_backend
from loadgen.run.embedded_sim import embedded_simulator
from loadgen.run.ids import x_request_id
from loadgen.run.shares import Share
from loadgen.run.sweep import SweepOptions
from loadgen.scale.sweep import run_sweep
from loadgen.tokenizer import load_tokenizer

# decode-token-us 12: a conc-512 MTP step costs 3 ms + 512 x 3 x 12 us = 21 ms, i.e.
# ~24k chunks/s at 512 streams (the 22k chunks/s reference point).
# spin-us 0: the simulator's busy-wait before each step delays the loopback delivery of
# chunks it has already written (the kernel defers the softirq to ksoftirqd, which waits
# for the spinning thread's tick): measured receive-lag p99 at conc 64 4.4 ms with the
# default spin, 0.8 ms without. Without the spin its steps start up to a timer tick late,
# which moves the simulator's schedule, not the truth this benchmark compares against.
SIM_ARGS = ("--decode-token-us", "12", "--prefill-token-us", "1", "--spin-us", "0", "--seed", "1")
CLIENT_CPU, SIM_CPU = 0, 1
REFERENCE_CHUNKS_PER_S = 22_000  # a fast server at conc 512 (the scale-out issue)


def pin_client() -> str:
    cpus = os.sched_getaffinity(0)
    if len(cpus) < 2 or CLIENT_CPU not in cpus or SIM_CPU not in cpus:
        return f"not pinned (available cpus: {sorted(cpus)})"
    os.sched_setaffinity(0, {CLIENT_CPU})
    return f"client on cpu {CLIENT_CPU}, simulator on cpu {SIM_CPU}"


def stats_us(values: np.ndarray) -> str:
    if values.size == 0:
        return "n/a"
    p50, p99 = np.percentile(values, [50, 99]) / 1e3
    return f"p50 {p50:8.1f}  p99 {p99:8.1f}  max {values.max() / 1e3:8.1f}"


def analyse(
    records: list[RequestRecord], trace: dict[str, Any], run_id: str, conc: int
) -> dict[str, Any]:
    lag, lag_intended, ttft_err, send_side, itl_err, gaps = [], [], [], [], [], []
    true_gaps: list[np.ndarray] = []
    chunks = 0
    for r in records:
        truth = trace.get(x_request_id(run_id, conc, r.request_id))
        if truth is None or not r.ok:
            continue
        rows = [c for c in truth["chunks"] if c[2] > 0]
        if len(rows) != len(r.chunk_ns):
            continue  # never expected: counts are exact (checked by the tests)
        client = np.array(r.chunk_ns, dtype=np.int64)
        sent = np.array([c[1] for c in rows], dtype=np.int64)
        intended = np.array([c[0] for c in rows], dtype=np.int64)
        lag.append(client - sent)
        lag_intended.append(client - intended)
        true_ttft = sent[0] - r.start_ns
        ttft_err.append(np.array([(client[0] - r.start_ns) - true_ttft]))
        send_side.append(np.array([truth["arrival_ns"] - r.start_ns]))
        itl_err.append(np.diff(client) - np.diff(sent))
        gaps.append(np.diff(client))
        true_gaps.append(np.diff(sent))
        chunks += len(client)
    starts = min(r.start_ns for r in records)
    ends = max(r.end_ns for r in records)

    def cat(parts: list[np.ndarray]) -> np.ndarray:
        return np.concatenate(parts) if parts else np.zeros(0, dtype=np.int64)

    all_gaps, all_true = cat(gaps), cat(true_gaps)
    return {
        "lag": cat(lag),
        "lag_intended": cat(lag_intended),
        "ttft_err": cat(ttft_err),
        "send_side": cat(send_side),
        "itl_err": cat(itl_err),
        "collapsed": float(np.mean(all_gaps < 50_000)) if all_gaps.size else 0.0,
        "client_collapsed": float(np.mean((all_gaps < 50_000) & (all_true >= 1_000_000)))
        if all_gaps.size
        else 0.0,
        "chunks_per_s": chunks / ((ends - starts) / 1e9),
        "chunks": chunks,
        "requests": len(records),
    }


def figures(a: dict[str, Any], result: dict[str, Any]) -> dict[str, float]:
    """The headline figures of one point (what the summary takes medians of)."""

    def pct(values: np.ndarray, q: float) -> float:
        return float(np.percentile(values, q) / 1e3) if values.size else float("nan")

    cpu, duration = result.get("client_cpu_seconds"), result.get("duration")
    return {
        "chunks/s": a["chunks_per_s"],
        "cpu us/chunk": result.get("client_cpu_per_chunk_us") or float("nan"),
        "core busy %": 100 * cpu / duration if cpu is not None and duration else float("nan"),
        "lag p50 ms": pct(a["lag"], 50) / 1e3,
        "lag p99 ms": pct(a["lag"], 99) / 1e3,
        "lag max ms": float(a["lag"].max() / 1e6) if a["lag"].size else float("nan"),
        "ttft err p99 ms": pct(a["ttft_err"], 99) / 1e3,
        "send p50 ms": pct(a["send_side"], 50) / 1e3,
        "send p99 ms": pct(a["send_side"], 99) / 1e3,
        "collapsed %": 100 * a["collapsed"],
        "client-collapsed %": 100 * a["client_collapsed"],
    }


def report_workers(
    conc: int,
    workers: int,
    records: list[RequestRecord],
    trace: dict[str, Any],
    run_id: str,
    result: dict[str, Any],
) -> None:
    """Per worker: its requests' chunks/s, its CPU per chunk and its receive lag."""
    processes = {p["process"]: p for p in result["client_processes"]}
    for worker in range(workers):
        share = Share(worker=worker, workers=workers)
        mine = [r for r in records if share.owner(conc)(r.request_id)]
        entry = processes.get(share.label)
        if not mine or entry is None:
            continue
        a = analyse(mine, trace, run_id, conc)
        print(
            f"  worker {worker}/{workers}: {a['requests']} requests, "
            f"{a['chunks_per_s']:,.0f} chunks/s, CPU {entry['cpu_per_chunk_us']:.1f} us per "
            f"chunk, loop lag p99 {entry['loop_lag_p99_ms']:.2f} ms; "
            f"receive lag (us) {stats_us(a['lag'])}"
        )
    parent = processes.get("parent")
    if parent is not None:
        print(f"  parent (collects records, writes JSONL): CPU {parent['cpu_seconds']:.2f} s")


def project(a: dict[str, Any], result: dict[str, Any], conc: int) -> None:
    """Streams per core at this point's chunk rate per stream: a projection, not a
    measurement of more cores."""
    per_chunk = result.get("client_cpu_per_chunk_us")
    if not per_chunk or not a["chunks_per_s"]:
        return
    for per_stream, what in (
        (a["chunks_per_s"] / conc, "this point's rate"),
        (REFERENCE_CHUNKS_PER_S / 512, "the 22k chunks/s at conc 512 reference"),
    ):
        streams = 1e6 / (per_chunk * per_stream)
        print(
            f"  projection at {per_stream:.0f} chunks/s per stream ({what}): "
            f"{per_chunk:.1f} us per chunk saturates one core at ~{streams:,.0f} streams; "
            "N cores (a worker each) ~N x that, less the parent's share"
        )


def report(conc: int, a: dict[str, Any], result: dict[str, Any]) -> None:
    cpu, per_chunk = result.get("client_cpu_seconds"), result.get("client_cpu_per_chunk_us")
    busy = cpu / result["duration"] if cpu is not None and result.get("duration") else None
    print(
        f"\nconc {conc}: {a['requests']} requests, {a['chunks']} chunks, "
        f"{a['chunks_per_s']:,.0f} chunks/s ingested"
    )
    if per_chunk is not None and busy is not None:
        print(
            f"  client CPU {per_chunk:.1f} us per chunk, {busy:.0%} of one core; loop lag "
            f"p99 {result['client_loop_lag_p99_ms']:.2f} ms, "
            f"max {result['client_loop_lag_max_ms']:.2f} ms"
        )
    sources = result.get("arrival_stamp_sources") or {}
    print("  arrival stamps: " + ", ".join(f"{k} {v} requests" for k, v in sources.items()))
    print(
        f"  receive lag vs sim send (us)      {stats_us(a['lag'])}; over 1 ms: "
        f"{int(np.count_nonzero(a['lag'] > 1_000_000))} chunks"
    )
    print(f"  receive lag vs step due (us)      {stats_us(a['lag_intended'])}")
    print(f"  TTFT error vs truth (us)          {stats_us(a['ttft_err'])}")
    print(f"  send cost: written -> sim handler {stats_us(a['send_side'])}")
    print(f"  ITL error vs truth, |err| (us)    {stats_us(np.abs(a['itl_err']))}")
    print(
        f"  chunk gaps < 50 us (collapsed)    {a['collapsed']:.2%}, by the client "
        f"(sent >= 1 ms apart) {a['client_collapsed']:.2%}"
    )


async def measure(
    concs: tuple[int, ...],
    isl: int,
    osl: int,
    per_conc: int,
    extra: tuple[str, ...],
    workdir: Path,
    http_client: str = "native",
    workers: int = 1,
    cpu_affinity: tuple[int, ...] = (),
) -> dict[int, dict[str, float]]:
    trace_path = workdir / "trace.jsonl"
    tokenizer = load_tokenizer()
    sim_args = (*SIM_ARGS, *extra, "--trace", str(trace_path))
    async with embedded_simulator(
        sim_args, log_path=workdir / "sim.log", cpus=frozenset({SIM_CPU})
    ) as base_url:
        spec = RunSpec.flat(
            conc=concs,
            isl=isl,
            osl=osl,
            base_url=base_url,
            prompts_per_conc=per_conc,
            warmup_per_conc=1,
            results_dir=workdir / "results",
            progress=False,
            workers=workers,
            cpu_affinity=cpu_affinity,
            http_client=http_client,
        )
        if http_client == "native":
            outcome = await run_sweep(spec, SweepOptions(tokenizer=tokenizer))
        else:  # the comparison client, plugged in through the backend's streams seam
            check_private_api()
            async with http_backend(spec, workdir, tokenizer, streams=AIOHTTP_STREAMS) as backend:
                outcome = await run_sweep(spec, SweepOptions(tokenizer=tokenizer, backend=backend))
    trace = {t["x_request_id"]: t for t in map(orjson.loads, trace_path.read_bytes().splitlines())}
    out = {}
    for point in outcome.points:
        records = read_jsonl(outcome.results_dir / f"requests_conc_{point.conc}.jsonl")
        totals = analyse(records, trace, outcome.run_id, point.conc)
        # the point's file as written (PointResult is a struct; the figures read its keys)
        result = orjson.loads((outcome.results_dir / f"conc_{point.conc}.json").read_bytes())
        report(point.conc, totals, result)
        if workers > 1:
            report_workers(point.conc, workers, records, trace, outcome.run_id, result)
        project(totals, result, point.conc)
        out[point.conc] = figures(totals, result)
    return out


def summarise(runs: dict[str, list[dict[int, dict[str, float]]]]) -> None:
    """Median over the runs of each figure, and its spread (min..max)."""
    print(
        "\nsummary: median [min..max] over "
        + ", ".join(f"{len(v)} {k} runs" for k, v in runs.items())
    )
    for client, results in runs.items():
        for conc in sorted({c for r in results for c in r}):
            rows = [r[conc] for r in results if conc in r]
            print(f"\n{client} conc {conc}:")
            for name in rows[0]:
                values = np.array([row[name] for row in rows])
                print(
                    f"  {name:16} {np.median(values):10.3f}  "
                    f"[{values.min():.3f}..{values.max():.3f}]"
                )


RSS_CHILD = """
import resource, sys, time
from loadgen.workload.bodies import BodyOptions
from loadgen.config.parsers import parse_conc, parse_cpu_list
from loadgen.config.spec import RunSpec
from loadgen.tokenizer import load_tokenizer
from loadgen.workload.plan import Workload
spec = RunSpec(conc=parse_conc("4..512"), isl=8192, osl=1024, base_url="http://127.0.0.1:1")
workload = Workload(spec, load_tokenizer(), BodyOptions(endpoint="completions", model="m"))
t0 = time.perf_counter(); total = 0
for conc in spec.conc:
    plan = workload.point(conc)
    total += len(plan.warmup) + len(plan.measured)
    del plan
print(total, time.perf_counter() - t0, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


def prompt_set_rss() -> None:
    done = subprocess.run(
        [sys.executable, "-c", RSS_CHILD], capture_output=True, text=True, check=True
    )
    total, seconds, rss_kb = done.stdout.split()
    print(
        f"\nprompt set of --conc 4..512 --isl 8192 --osl 1024: {int(total):,} requests "
        f"built in {float(seconds):.1f} s, peak RSS {int(rss_kb) / 1024:,.0f} MiB "
        "(one point in memory at a time)"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conc", default="64,256,512")
    parser.add_argument("--isl", type=int, default=256)
    parser.add_argument("--osl", type=int, default=256)
    parser.add_argument("--prompts-per-conc", type=int, default=2)
    parser.add_argument("--sim-args", default="", help="extra simulator flags")
    parser.add_argument(
        "--http-client",
        default="native",
        help="comma-separated streaming clients to compare: native, aiohttp",
    )
    parser.add_argument("--runs", type=int, default=1, help="runs per client, alternating")
    parser.add_argument("--skip-rss", action="store_true")
    parser.add_argument("--rss-only", action="store_true")
    parser.add_argument("--workers", type=int, default=1, help="client worker processes")
    parser.add_argument(
        "--cpu-affinity",
        default="",
        help="pin worker i to the i-th of these CPUs (e.g. 2-5); default: "
        "all client processes on the client core",
    )
    args = parser.parse_args()
    print(f"client_overhead: {pin_client()}; loop: uvloop; {time.strftime('%Y-%m-%d %H:%M')}")
    if not args.rss_only:
        import uvloop

        concs = tuple(int(c) for c in args.conc.split(","))
        clients = args.http_client.split(",")
        cpus = parse_cpu_list(args.cpu_affinity) if args.cpu_affinity else ()
        if args.workers > 1 and set(clients) != {"native"}:
            parser.error("--workers > 1: worker processes measure with the native client only")
        runs: dict[str, list[dict[int, dict[str, float]]]] = {c: [] for c in clients}
        for run in range(args.runs):
            for client in clients:
                print(
                    f"\n=== run {run + 1}/{args.runs}, --http-client {client}; "
                    f"load average {os.getloadavg()[0]:.2f} ==="
                )
                with tempfile.TemporaryDirectory(prefix="lg-bench-") as tmp:
                    runs[client].append(
                        uvloop.run(
                            measure(
                                concs,
                                args.isl,
                                args.osl,
                                args.prompts_per_conc,
                                tuple(args.sim_args.split()),
                                Path(tmp),
                                client,
                                args.workers,
                                cpus,
                            )
                        )
                    )
        if args.runs > 1 or len(clients) > 1:
            summarise(runs)
    if not args.skip_rss:
        prompt_set_rss()
    print(
        f"bench process peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:,.0f}"
        " MiB"
    )


if __name__ == "__main__":
    main()
