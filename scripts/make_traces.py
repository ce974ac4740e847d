"""Write synthetic agentic traces (Weka/AgentX schema, one per line) to stdout.

Shaped like coding-agent sessions (loadgen/workload/tracegen.py): a shared system
prefix, contexts growing by each reply and tool result, think times, subagent fan-out.
The trace-replay example of docs/sessions.md:

    .venv/bin/python scripts/make_traces.py --count 16 --seed 7 > agentic.jsonl
"""

from __future__ import annotations

import argparse
import sys

import orjson

from loadgen.workload.tracegen import TraceShape, generate_traces


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=16, help="traces (root sessions)")
    parser.add_argument("--seed", type=int, default=7)
    parser.add_argument("--max-context", type=int, default=32_000, help="tokens")
    parser.add_argument(
        "--system-tokens",
        type=int,
        default=6_000,
        help="the prefix every session (and subagent) shares",
    )
    parser.add_argument(
        "--tool-result-tokens",
        type=int,
        default=1_500,
        help="most new input tokens per later request",
    )
    args = parser.parse_args()
    shape = TraceShape(
        system_tokens=args.system_tokens,
        max_context=args.max_context,
        tool_result_tokens=(100, args.tool_result_tokens),
    )
    for trace in generate_traces(args.count, args.seed, shape):
        sys.stdout.buffer.write(orjson.dumps(trace) + b"\n")


if __name__ == "__main__":
    main()
