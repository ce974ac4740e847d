"""Memory and render speed of agentic trace replay at scale (prints figures).

Builds synthetic Weka-schema traces whose contexts grow to ~128k tokens, then plays them on
512 lanes the way run/sessions.py does, without a server: every lane renders each of its
turns when it is due (body bytes and all, as sent) and drops it. Reports the process's
peak RSS and the render time per turn (p50/p99/max), wall and CPU (thread time: on a
shared machine the wall figure also holds the time other processes had the core). Turns
render on a worker thread (run/sessions.py), so this is how late a turn is sent after it
is due, and the CPU figure is how long the render holds the GIL (the event loop gets it
back within the interpreter's 5 ms switch interval at most).

    .venv/bin/python bench/session_replay.py [--lanes 512] [--max-context 128000]
"""

from __future__ import annotations

import argparse
import resource
import time

import numpy as np

from loadgen.run.loop_health import no_gc_pauses
from loadgen.tokenizer import load_tokenizer
from loadgen.workload.bodies import BodyOptions
from loadgen.workload.session_render import Play, RenderSettings, SessionRenderer
from loadgen.workload.tracegen import TraceShape, generate_traces
from loadgen.workload.traces import load_weka


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--lanes", type=int, default=512)
    parser.add_argument("--max-context", type=int, default=128_000)
    parser.add_argument("--turns", type=int, default=12, help="turns rendered per lane")
    args = parser.parse_args()
    shape = TraceShape(
        requests=(args.turns, args.turns),
        system_tokens=20_000,
        first_user_tokens=(2_000, 6_000),
        tool_result_tokens=(4_000, 12_000),
        output_tokens=(200, 800),
        max_context=args.max_context,
        subagent_prob=0.0,
    )
    import tempfile
    from pathlib import Path

    import orjson

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "traces.jsonl"
        path.write_bytes(
            b"".join(orjson.dumps(t) + b"\n" for t in generate_traces(args.lanes, 1, shape))
        )
        trees = load_weka(path)
    tokenizer = load_tokenizer()
    renderer = SessionRenderer(
        RenderSettings("dsv4", "thinking", None, ("X-Session-ID",), True),
        tokenizer,
        BodyOptions(endpoint="completions", model="m"),
        64,
        0,
    )
    plays = [
        renderer.play(tree, (1, args.lanes, lane, lane), f"b.{lane}")
        for lane, tree in enumerate(trees)
    ]
    rss_before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    times: list[tuple[int, int]] = []
    contexts: list[int] = []
    longest = max(len(tree.root.turns) for tree in trees)
    with no_gc_pauses():  # as in a point's measured phase (run/loop_health.py)
        render_all(renderer, plays, longest, times, contexts)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"lanes {args.lanes}, turns rendered {len(times)}, max context {max(contexts):,} "
        f"tokens, mean context {int(np.mean(contexts)):,}"
    )
    for name, column in (("wall", 0), ("CPU", 1)):
        ms = np.asarray([t[column] for t in times]) / 1e6
        print(
            f"render per turn (body bytes ready), {name}: p50 {np.percentile(ms, 50):.2f} "
            f"ms, p99 {np.percentile(ms, 99):.2f} ms, max {ms.max():.2f} ms"
        )
    print(
        f"cached blocks {renderer.blocks.cached_blocks:,}; peak RSS {rss:,.0f} MiB "
        f"(after loading traces and tokenizer: {rss_before:,.0f} MiB)"
    )


def render_all(
    renderer: SessionRenderer,
    plays: list[Play],
    longest: int,
    times: list[tuple[int, int]],
    contexts: list[int],
) -> None:
    index = 0
    for turn in range(longest):  # all lanes advance together: every session is live
        for play in plays:
            if turn >= len(play.tree.root.turns):
                continue
            start, cpu = time.perf_counter_ns(), time.thread_time_ns()
            request = renderer.render(play, play.tree.root, turn, index)
            times.append((time.perf_counter_ns() - start, time.thread_time_ns() - cpu))
            contexts.append(request.input_len)
            index += 1
            del request


if __name__ == "__main__":
    main()
