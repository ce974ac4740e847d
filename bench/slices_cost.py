"""What --slice-duration and the over-saturation watch cost, and where: nothing per chunk.

Run: .venv/bin/python bench/slices_cost.py [--requests N] [--osl N] [--slice S] [--live]

1. time_slices() on a synthetic conc-512 point (the records of bench/summary_speed.py),
   beside summarize() on the same records: both run once, after the point, off the
   measured phase.
2. SaturationWatch.observe() per finished record and one verdict (the open loop asks at
   most every 0.5 s): per record, never per chunk.
3. --live: the same simulator point with and without --slice-duration (closed loop, so
   only the slices differ), three runs each, client CPU per chunk (client_cpu_per_chunk_us,
   the measured phase's process CPU over its chunks) as the results report it.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from summary_speed import synthetic_point

from loadgen.metrics.saturation import SaturationRule
from loadgen.metrics.slices import time_slices
from loadgen.metrics.summary import PointContext, summarize
from loadgen.run.saturation_watch import SaturationWatch

SIM = "--step-fixed-ms 4 --decode-token-us 20 --prefill-token-us 2 --spin-us 0 --seed 7"


def best_of(repeat: int, work: object) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        work()  # type: ignore[operator]
        times.append(time.perf_counter() - t0)
    return min(times)


def after_the_point(args: argparse.Namespace) -> None:
    records = synthetic_point(512, args.requests, args.osl, seed=0)
    chunks = sum(len(r.chunk_ns) for r in records)
    span = (max(r.end_ns for r in records) - min(r.start_ns for r in records)) / 1e9
    ctx = PointContext(conc=512, input_len=8192, output_len=args.osl, percentiles=(50.0,))
    slices = time_slices(records, args.slice)
    t_slices = best_of(3, lambda: time_slices(records, args.slice))
    t_summary = best_of(3, lambda: summarize(records, ctx))
    print(
        f"point: {len(records)} records, {chunks} chunks, {span:.0f} s, "
        f"{len(slices)} slices of {args.slice:g} s"
    )
    print(
        f"time_slices {t_slices * 1e3:.0f} ms (summarize {t_summary * 1e3:.0f} ms), once "
        "after the point"
    )
    watch = SaturationWatch(
        SaturationRule(window_s=30.0),
        records[0].start_ns,
        [r.scheduled_ns - records[0].start_ns for r in records],
    )
    t0 = time.perf_counter()
    for record in records:
        watch.observe(record)
    per_record = (time.perf_counter() - t0) / len(records)
    now = max(r.end_ns for r in records)
    t0 = time.perf_counter()
    watch.saturated(now)
    verdict = time.perf_counter() - t0
    print(
        f"SaturationWatch.observe {per_record * 1e6:.2f} us per record "
        f"({per_record * 1e6 * len(records) / chunks:.3f} us per chunk if spread over "
        f"them), one verdict {verdict * 1e3:.1f} ms (at most every 0.5 s)"
    )


def live_cpu_per_chunk(slice_s: float | None, results: Path) -> float:
    cmd = [
        sys.executable,
        "-m",
        "loadgen",
        "--sim",
        "--sim-args",
        SIM,
        "--conc",
        "64",
        "--isl",
        "64",
        "--osl",
        "256",
        "--prompts-per-conc",
        "4",
        "--no-progress",
        "--results",
        str(results),
    ]
    if slice_s is not None:
        cmd += ["--slice-duration", str(slice_s)]
    subprocess.run(cmd, check=True, capture_output=True, timeout=300)
    point = json.loads((results / "conc_64.json").read_text())
    return float(point["client_cpu_per_chunk_us"])


def live(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        figures: dict[str, list[float]] = {"without": [], "with": []}
        for run in range(3):  # interleaved: a noisy neighbour hits both alike
            for label, slice_s in (("without", None), ("with", args.slice)):
                path = Path(tmp) / f"{label}-{run}"
                figures[label].append(live_cpu_per_chunk(slice_s, path))
    for label, values in figures.items():
        print(
            f"live conc 64, {label} --slice-duration: client CPU per chunk "
            f"{statistics.median(values):.1f} us (runs {', '.join(f'{v:.1f}' for v in values)})"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=5120)
    parser.add_argument("--osl", type=int, default=1024)
    parser.add_argument("--slice", type=float, default=1.0)
    parser.add_argument("--live", action="store_true")
    args = parser.parse_args()
    np.seterr(all="ignore")
    after_the_point(args)
    if args.live:
        live(args)


if __name__ == "__main__":
    main()
