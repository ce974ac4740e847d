"""What `--trials N` costs: nothing per chunk, a little per trial.

The read path (loadgen/client/) is the same code with or without --trials: a trial is a
whole point, and what --trials adds runs between trials (closing idle connections,
drawing the next trial's prompts) and after the last one (reading the trials' records
back and summarizing them pooled, run/trials.py). This runs the embedded simulator once
with `--trials 1` and once with `--trials N` (same settings) and prints

- each point's client CPU per chunk (client_cpu_per_chunk_us, the measured phase only):
  a trial's should be the single run's, within the machine's noise;
- the pooling cost: reading the N trials' JSONL back and assembling the pooled point,
  timed here on the files the run wrote, per record and per chunk.

    .venv/bin/python bench/trials_cost.py --conc 16 --trials 3

Measured on the shared 2-core machine (load average ~5, so the simulator fell behind
its schedule by up to 54 ms): client CPU per chunk 33.6 us with --trials 1, and 37.3,
31.1, 32.0 us for the three trials of --trials 3 -- the same within the machine's noise;
pooling the 3 trials (384 records, 21,895 chunks; reading the JSONL back included) took
327 ms once, after the last trial, outside every measured phase.
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import orjson

from loadgen.config.spec import RunSpec
from loadgen.results.store import ResultsDir
from loadgen.run.assemble import TrialPart, assemble_trials
from loadgen.run.point import point_context
from loadgen.run.trials import trial_seed


def run(results: Path, conc: int, trials: int, osl: int) -> None:
    subprocess.run(
        [
            sys.executable,
            "-m",
            "loadgen",
            "--sim",
            "--conc",
            str(conc),
            "--isl",
            "64",
            "--osl",
            str(osl),
            "--prompts-per-conc",
            "8",
            "--encoder",
            "raw",
            "--no-progress",
            "--trials",
            str(trials),
            "--results",
            str(results),
        ],
        check=True,
        stdout=subprocess.DEVNULL,
    )


def cpu_per_chunk(path: Path) -> float:
    return float(orjson.loads(path.read_bytes())["client_cpu_per_chunk_us"])


def pooling_seconds(results: Path, conc: int, trials: int) -> tuple[float, int, int]:
    store = ResultsDir(results)
    start = time.perf_counter()
    parts = [
        TrialPart(
            store.read_trial_point(conc, k),
            store.read_records(conc, k),
            trial_seed(0, k),
            store.point_file(conc, k).name,
        )
        for k in range(1, trials + 1)
    ]
    spec = RunSpec.flat(conc=(conc,), isl=64, osl=16, sim=True, encoder="raw")
    pooled = assemble_trials(
        parts, point_context(spec, conc), conc, server_before=None, server_after=None
    )
    seconds = time.perf_counter() - start
    return seconds, pooled.metrics.num_prompts, pooled.metrics.total_chunks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--conc", type=int, default=16)
    parser.add_argument("--trials", type=int, default=3)
    parser.add_argument("--osl", type=int, default=128)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        single, repeated = Path(tmp) / "single", Path(tmp) / "trials"
        run(single, args.conc, 1, args.osl)
        run(repeated, args.conc, args.trials, args.osl)
        print(f"conc {args.conc}, osl {args.osl}: client CPU per chunk (us)")
        print(f"  --trials 1: {cpu_per_chunk(single / f'conc_{args.conc}.json'):.2f}")
        for k in range(1, args.trials + 1):
            path = repeated / f"conc_{args.conc}_trial_{k}.json"
            print(f"  --trials {args.trials}, trial {k}: {cpu_per_chunk(path):.2f}")
        seconds, records, chunks = pooling_seconds(repeated, args.conc, args.trials)
        print(
            f"pooling {args.trials} trials ({records} records, {chunks} chunks), once per "
            f"point after its last trial: {seconds * 1e3:.1f} ms = "
            f"{seconds / records * 1e6:.1f} us/record, {seconds / chunks * 1e6:.2f} us/chunk"
        )


if __name__ == "__main__":
    main()
