"""How long MetricsObserver.request_finished holds the event loop per finished request.

It runs between other requests' chunks, so its cost is client-side lag. Compares the bulk
(numpy) histograms with prometheus-client's per-value Histogram.observe for the same
records. Usage: .venv/bin/python bench/exporter_observe.py [--osl 1024] [--records 500]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from prometheus_client import CollectorRegistry, Histogram

from loadgen.records import RequestRecord, TokenSource
from loadgen.sinks.prometheus import ITL_BUCKETS, LoadgenMetrics, MetricsObserver


def synthetic_records(count: int, osl: int, seed: int) -> list[RequestRecord]:
    """MTP-like streams (1-3 tokens per chunk), ~20 ms steps; deterministic under seed."""
    rng = np.random.default_rng(seed)
    records = []
    for i in range(count):
        tokens = [1]
        while sum(tokens) < osl:
            tokens.append(int(min(rng.integers(1, 4), osl - sum(tokens))))
        gaps = rng.gamma(4.0, 5e6, size=len(tokens)).astype(np.int64) + 1
        chunk_ns = tuple(int(t) for t in 1_000_000 + np.cumsum(gaps))
        records.append(
            RequestRecord(
                request_id=i,
                conc=64,
                input_len=1024,
                max_tokens=osl,
                scheduled_ns=0,
                start_ns=500_000,
                connect_ns=0,
                chunk_ns=chunk_ns,
                chunk_tokens=tuple(tokens),
                end_ns=chunk_ns[-1] + 1,
                token_source=TokenSource.TOKEN_IDS,
                prompt_tokens=1024,
                completion_tokens=osl,
                finish_reason="length",
                status=200,
            )
        )
    return records


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--osl", type=int, default=1024)
    parser.add_argument("--records", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    records = synthetic_records(args.records, args.osl, args.seed)
    chunks = sum(len(r.chunk_ns) for r in records) / len(records)

    observer = MetricsObserver(
        LoadgenMetrics(CollectorRegistry()),
        model="m",
        endpoint="completions",
        points=1,
        spec_tokens=2,
    )
    observer.point_started(64, len(records))
    start = time.perf_counter_ns()
    for record in records:
        observer.request_started(64)
        observer.request_finished(record)
    bulk_us = (time.perf_counter_ns() - start) / len(records) / 1e3

    # Reference: per-chunk-gap observe() on prometheus-client histograms (chunk + token ITL).
    registry = CollectorRegistry()
    per_chunk = Histogram("c_seconds", "c", buckets=ITL_BUCKETS, registry=registry)
    per_token = Histogram("t_seconds", "t", buckets=ITL_BUCKETS, registry=registry)
    start = time.perf_counter_ns()
    for record in records:
        for i in range(1, len(record.chunk_ns)):
            gap = (record.chunk_ns[i] - record.chunk_ns[i - 1]) / 1e9
            per_chunk.observe(gap)
            for _ in range(record.chunk_tokens[i]):
                per_token.observe(gap / record.chunk_tokens[i])
    naive_us = (time.perf_counter_ns() - start) / len(records) / 1e3

    print(f"records: {len(records)}, osl {args.osl}, {chunks:.0f} chunks/record")
    print(f"request_finished (all instruments, numpy):   {bulk_us:8.1f} us/record")
    print(f"per-value Histogram.observe (2 ITL only):     {naive_us:8.1f} us/record")


if __name__ == "__main__":
    main()
