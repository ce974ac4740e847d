"""How long summarize() takes on a synthetic conc-512 point (5,120 requests x 1,024 tokens).

Run: .venv/bin/python bench/summary_speed.py [--requests N] [--osl N] [--repeat N]
Prints the chunk count, the one-off record->array build time and summarize()'s time.
The records are synthetic (closed loop, 1-3 tokens per chunk, 20-40 ms gaps, seeded).
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from loadgen.metrics.arrays import PointArrays
from loadgen.metrics.summary import PointContext, summarize
from loadgen.records import RequestRecord, TokenSource


def synthetic_point(conc: int, requests: int, osl: int, seed: int) -> list[RequestRecord]:
    rng = np.random.default_rng(seed)
    slot_free = np.full(conc, 10**9, dtype=np.int64)
    records = []
    for request_id in range(requests):
        slot = int(np.argmin(slot_free))
        due = int(slot_free[slot])
        start = due + 1_000
        accepted = rng.integers(0, 3, osl)  # 1 + accepted tokens per step, K = 2
        tokens = np.minimum(np.concatenate([[1], 1 + accepted]), osl)
        counts = tokens[: int(np.searchsorted(np.cumsum(tokens), osl)) + 1]
        counts[-1] -= int(counts.sum()) - osl
        chunk_ns = start + np.cumsum(rng.integers(20_000_000, 40_000_000, counts.size))
        end = int(chunk_ns[-1]) + 10_000
        records.append(
            RequestRecord(
                request_id, conc, 8192, osl, due, start, 0,
                tuple(chunk_ns.tolist()), tuple(counts.tolist()), end, TokenSource.TOKEN_IDS,
                8192, osl, "length", 200,
            )
        )  # fmt: skip
        slot_free[slot] = end
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--conc", type=int, default=512)
    parser.add_argument("--requests", type=int, default=5120)
    parser.add_argument("--osl", type=int, default=1024)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    records = synthetic_point(args.conc, args.requests, args.osl, seed=0)
    chunks = sum(len(r.chunk_ns) for r in records)
    ctx = PointContext(
        conc=args.conc, input_len=8192, output_len=args.osl, spec_tokens=2,
        slos={"ttft": 2000.0, "tpot": 50.0}, percentiles=(50.0,), num_gpus=8,
    )  # fmt: skip
    t0 = time.perf_counter()
    PointArrays.build(records)
    build_s = time.perf_counter() - t0
    times = []
    for _ in range(args.repeat):
        t0 = time.perf_counter()
        summarize(records, ctx)
        times.append(time.perf_counter() - t0)
    print(f"records {len(records)}  chunks {chunks}  gaps {chunks - len(records)}")
    print(f"PointArrays.build {build_s * 1000:.0f} ms")
    print(f"summarize: best {min(times) * 1000:.0f} ms, median {np.median(times) * 1000:.0f} ms")


if __name__ == "__main__":
    main()
