"""Benchmark: synthesize the prompts of one big sweep point and report speed and memory.

Default: 5,120 prompts of 8,192 tokens (the conc-512 point of an 8k/1k sweep, 10 prompts per
slot), DeepSeek-V4 template, thinking mode. Target: under 10 s on one core. The process pins
itself to one CPU and the tokenizer to one thread, so the figure is a one-core figure; on a
shared machine it is still noisy, so run it a few times.

    .venv/bin/python bench/prompt_synthesis.py [--count 5120] [--isl 8192] [--verify 32]
        [--tokenizer PATH|ORG/NAME --encoder raw]   # another model's tokenizer

After timing, --verify N re-encodes N prompts spread over the batch and checks their lengths.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("RAYON_NUM_THREADS", "1")  # before tokenizers starts its thread pool
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

import resource
import sys
import time

import numpy as np

from loadgen.tokenizer import encode, load_tokenizer
from loadgen.workload.prompts import synthesis, synthesize_prompts

TARGET_SECONDS = 10.0


def rss_mib() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def peak_rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # KiB on Linux


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--count", type=int, default=5120, help="prompts (default 5120)")
    parser.add_argument("--isl", type=int, default=8192, help="tokens per prompt (default 8192)")
    parser.add_argument("--encoder", default="dsv4", choices=("dsv4", "raw"))
    parser.add_argument("--thinking", default="thinking", choices=("chat", "thinking"))
    parser.add_argument("--effort", default=None, choices=("low", "high", "max"))
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--cpu", type=int, default=None, help="CPU to pin to (default: first)")
    parser.add_argument("--verify", type=int, default=32, help="prompts to re-encode after")
    parser.add_argument("--tokenizer", default=None, help="default: DeepSeek-V4's")
    return parser.parse_args(argv)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    cpu = args.cpu if args.cpu is not None else min(os.sched_getaffinity(0))
    os.sched_setaffinity(0, {cpu})
    tokenizer = load_tokenizer(args.tokenizer, check_dsv4=args.encoder == "dsv4")
    started = time.perf_counter()
    how = synthesis(
        encoder=args.encoder,
        thinking_mode=args.thinking,  # word pool, once
        reasoning_effort=args.effort,
        tokenizer=tokenizer,
    )
    pool_s = time.perf_counter() - started
    rss_before = rss_mib()

    started = time.perf_counter()
    prompts = synthesize_prompts(
        [args.isl] * args.count,
        encoder=args.encoder,
        thinking_mode=args.thinking,
        reasoning_effort=args.effort,
        tokenizer=tokenizer,
        rng=np.random.default_rng(args.seed),
    )
    elapsed = time.perf_counter() - started
    rss_after, peak = rss_mib(), peak_rss_mib()
    text_mib = sum(sys.getsizeof(p.text) for p in prompts) / 2**20
    tokens = args.count * args.isl

    print(
        f"prompts: {args.count} x {args.isl} tokens ({args.encoder}, {args.thinking}, "
        f"effort={args.effort}) on CPU {cpu}"
    )
    print(f"construction: {how.method}" + (f" ({how.reason})" if how.reason else ""))
    print(f"word pool build: {pool_s:.3f} s (once per tokenizer)")
    print(
        f"synthesis: {elapsed:.3f} s  ->  {args.count / elapsed:,.0f} prompts/s, "
        f"{tokens / elapsed / 1e6:,.1f} M tokens/s"
    )
    print(
        f"memory: prompt texts {text_mib:,.0f} MiB ({text_mib * 2**20 / tokens:.1f} B/token); "
        f"RSS {rss_before:,.0f} -> {rss_after:,.0f} MiB; peak RSS {peak:,.0f} MiB"
    )
    verdict = "PASS" if elapsed < TARGET_SECONDS else "FAIL"
    print(f"target < {TARGET_SECONDS:.0f} s: {verdict} (shared machines are noisy: rerun)")

    if args.verify:
        picks = np.linspace(0, args.count - 1, num=min(args.verify, args.count), dtype=int)
        wrong = [int(i) for i in picks if len(encode(tokenizer, prompts[i].text)) != args.isl]
        print(f"verify: re-encoded {len(picks)} prompts, {len(wrong)} of wrong length")
        if wrong:
            return 1
    return 0 if verdict == "PASS" else 1


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
