"""How well loadgen reconstructs engine steps from its receive stamps, against the
simulator's own step log (`loadgen sim --step-log`).

Per configuration (concurrency x MTP on/off x data-parallel size x stream interval) it
starts `loadgen sim` and `loadgen` as two processes (pinned to one CPU each, or with
--cpus same both to one: a loaded client), runs one point, stops the simulator (which
writes its step log) and compares:

- step time p50/p99: loadgen's `steps_time_*` against the log's steps (end - start) that
  sent a chunk, in the point's window (relative error);
- requests per step: loadgen's against the log's mean `requests` over those steps;
- prefill steps: each logged step that sent chunks is matched to the estimated cluster
  whose first arrival follows its end within 2 ms; precision and recall of "carried a
  prefill completion";
- engines detected against --data-parallel-size (given the count the simulator's /metrics
  label, as loadgen reads it, or with --engines unlabelled found from the arrivals alone).

    .venv/bin/python bench/steps_accuracy.py                      # the default matrix
    .venv/bin/python bench/steps_accuracy.py --conc 4,64 --dp 1 --interval 1 --mtp on
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from loadgen.metrics.arrays import PointArrays, is_completed
from loadgen.metrics.steps import cluster, groups_engines, merges_steps, step_fields
from loadgen.records import ArrivalStamps
from loadgen.results.jsonl import read_jsonl
from loadgen.sim.steplog import read_step_log

CPUS = {"split": ("1", "0"), "same": ("0", "0")}  # (simulator, client)
MATCH_NS = 2_000_000


@contextlib.contextmanager
def workdir(keep: str | None) -> Iterator[str]:
    if keep is None:
        with tempfile.TemporaryDirectory() as tmp:
            yield tmp
    else:
        yield tempfile.mkdtemp(dir=keep)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@contextlib.contextmanager
def simulator(flags: list[str], port: int, cpu: str) -> Iterator[None]:
    proc = subprocess.Popen(
        ["taskset", "-c", cpu, sys.executable, "-m", "loadgen", "sim", "--port", str(port), *flags],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1).close()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the simulator did not start") from None
                time.sleep(0.2)
        yield
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=30)


def run_point(
    conc: int, flags: list[str], results: Path, waves: int, osl: int, cpus: tuple[str, str]
) -> None:
    port = free_port()
    with simulator(flags, port, cpus[0]):
        done = subprocess.run(
            [
                "taskset", "-c", cpus[1], sys.executable, "-m", "loadgen",
                "--base-url", f"http://127.0.0.1:{port}",
                "--conc", str(conc), "--isl", "256", "--osl", str(osl),
                "--prompts-per-conc", str(waves), "--warmup-per-conc", "0",
                "--no-progress", "--results", str(results),
            ],
            capture_output=True, text=True, timeout=600, check=False,
        )  # fmt: skip
        if done.returncode != 0:
            raise RuntimeError(done.stderr[-2000:])


def truth(log: list[dict[str, Any]], lo: int, hi: int) -> dict[str, Any]:
    """The logged steps that sent chunks in [lo, hi]; `ms` as the client can see them:
    from the previous step's first write (or this step's start, after idle) to this
    step's first write; `model_ms` the step model's end - start."""
    previous: dict[int, int] = {}
    seen = []
    for s in sorted(log, key=lambda s: (s["engine"], s["step"])):
        began = max(previous.get(s["engine"], s["start_ns"]), s["start_ns"])
        previous[s["engine"]] = s["sent_ns"]
        seen.append((s, s["sent_ns"] - began))
    kept = [(s, d) for s, d in seen if s["chunks"] > 0 and lo <= s["sent_ns"] <= hi]
    steps = [s for s, _ in kept]
    return {
        "end": np.array([s["sent_ns"] for s in steps], dtype=np.int64),
        "engine": np.array([s["engine"] for s in steps], dtype=np.int64),
        "ms": np.array([d / 1e6 for _, d in kept]),
        "model_ms": np.array([(s["end_ns"] - s["start_ns"]) / 1e6 for s in steps]),
        "late_us": np.array([(s["sent_ns"] - s["end_ns"]) / 1e3 for s in steps]),
        "requests": np.array([s["requests"] for s in steps], dtype=np.float64),
        "prefill": np.array([bool(s["prefill_done"]) for s in steps]),
    }


def compare(
    records_file: Path, log_file: Path, interval: int, dp: int, labelled: bool
) -> dict[str, Any]:
    records = [r for r in read_jsonl(records_file) if is_completed(r)]
    records.sort(key=lambda r: r.request_id)
    arrays = PointArrays.build(records)
    kernel = all(r.arrival_stamps is ArrivalStamps.KERNEL for r in records)
    started = time.perf_counter()
    # the simulator's /metrics label each engine's steps (engine="<i>"), as vLLM's do:
    # loadgen then knows the count; `--engines unlabelled` is a server that does not say
    server_engines = dp if labelled else None
    fields = step_fields(arrays, kernel, None, server_engines)
    elapsed = time.perf_counter() - started
    grouped = groups_engines(merges_steps(arrays, None), server_engines)
    clusters, _ = cluster(arrays, group_engines=grouped)  # as step_fields formed them
    prefill_est = np.zeros(clusters.start_ns.size, dtype=np.bool_)
    prefill_est[clusters.cluster[arrays.first]] = True
    lo, hi = int(arrays.chunk_ns.min()) - MATCH_NS, int(arrays.chunk_ns.max())
    t = truth(read_step_log(log_file), lo, hi)
    starts = np.sort(clusters.start_ns)
    by_start = np.argsort(clusters.start_ns)
    j = np.searchsorted(starts, t["end"])
    ok = (j < starts.size) & (starts[np.minimum(j, starts.size - 1)] - t["end"] <= MATCH_NS)
    matched = by_start[np.minimum(j, starts.size - 1)]
    found = ok & t["prefill"] & prefill_est[matched]
    recall = int(np.count_nonzero(found)) / max(1, int(np.count_nonzero(t["prefill"])))
    # each estimated prefill cluster counts once, however many logged steps it matched
    confirmed = np.unique(matched[found]).size
    precision = confirmed / max(1, int(np.count_nonzero(prefill_est)))

    def rel(est: float | None, true: float) -> float | None:
        return None if est is None else (est - true) / true

    return {
        "chunks": int(arrays.chunk_ns.size),
        "seconds": elapsed,
        "steps_est": fields["steps_observed"],
        "steps_true": int(t["end"].size),
        "p50_err": rel(fields["steps_time_p50_ms"], float(np.percentile(t["ms"], 50))),
        "p99_err": rel(fields["steps_time_p99_ms"], float(np.percentile(t["ms"], 99))),
        "p50_true": float(np.percentile(t["ms"], 50)),
        "p50_model": float(np.percentile(t["model_ms"], 50)),
        "p50_est": fields["steps_time_p50_ms"],
        "req_err": rel(fields["steps_requests_per_step"], float(t["requests"].mean())),
        "precision": precision,
        "recall": recall,
        "engines": fields["steps_engines"],
        "engines_true": dp,
        "k_est": fields["steps_stream_interval"],
        "k_true": interval,
        "late_us_p50": float(np.percentile(t["late_us"], 50)),
        "note": fields["steps_note"],
    }


def fmt(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, float):
        return f"{value:+.3f}" if abs(value) < 10 else f"{value:.1f}"
    return str(value)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conc", default="1,4,16,64,256")
    parser.add_argument("--mtp", default="on,off")
    parser.add_argument("--dp", default="1,4")
    parser.add_argument("--interval", default="1,10")
    parser.add_argument("--osl", type=int, default=128)
    parser.add_argument("--waves", type=int, default=2, help="prompts per conc = waves x conc")
    parser.add_argument(
        "--cpus",
        choices=sorted(CPUS),
        default="split",
        help="split: simulator on cpu 1, client on cpu 0; same: both on cpu 0 (the client "
        "then reads late, several steps' chunks in one read)",
    )
    parser.add_argument(
        "--step-fixed-ms",
        type=float,
        default=12.0,
        help="the simulator's fixed step cost: 12 ms (a decode step of a large MoE model) "
        "keeps a simulator with 4 engines on its schedule on a shared machine",
    )
    parser.add_argument("--keep", default=None, help="keep each run's files under this directory")
    parser.add_argument(
        "--engines",
        choices=("labelled", "unlabelled"),
        default="labelled",
        help="labelled: loadgen knows the engine count from the server's /metrics, as from "
        "vLLM's and the simulator's; unlabelled: a server that does not say, so the "
        "engines are found from the arrivals alone",
    )
    args = parser.parse_args()
    columns = [
        "chunks", "seconds", "steps_est", "steps_true", "p50_model", "p50_true", "p50_est",
        "p50_err",
        "p99_err", "req_err", "precision", "recall", "engines", "engines_true", "k_est",
        "k_true", "late_us_p50",
    ]  # fmt: skip
    print("conc mtp dp k " + " ".join(columns) + " note", flush=True)
    for dp in map(int, args.dp.split(",")):
        for interval in map(int, args.interval.split(",")):
            for mtp in args.mtp.split(","):
                for conc in map(int, args.conc.split(",")):
                    with workdir(args.keep) as tmp:
                        log = Path(tmp) / "steps.jsonl"
                        flags = [
                            "--step-log", str(log), "--data-parallel-size", str(dp),
                            "--stream-interval", str(interval), "--no-enable-prefix-caching",
                            "--spec-tokens", "2" if mtp == "on" else "0",
                            "--step-fixed-ms", str(args.step_fixed_ms),
                        ]  # fmt: skip
                        results = Path(tmp) / "results"
                        waves = max(args.waves, -(-4 // conc))
                        run_point(conc, flags, results, waves, args.osl, CPUS[args.cpus])
                        row = compare(
                            results / f"requests_conc_{conc}.jsonl",
                            log,
                            interval,
                            dp,
                            args.engines == "labelled",
                        )
                    cells = " ".join(fmt(row[c]) for c in columns)
                    print(f"{conc} {mtp} {dp} {interval} {cells} {row['note'] or ''}", flush=True)


if __name__ == "__main__":
    os.environ.setdefault("PYTHONHASHSEED", "0")
    main()
