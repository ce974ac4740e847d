"""How fast can the simulator stream? One server process, one minimal client process.

    .venv/bin/python bench/sim_throughput.py [--conc 512] [--duration 10] [--step-ms 20]

The server (pinned to core 0 when there are two) runs `running_simulator` with a fixed
step time and a trace. The client (pinned to core 1) holds `--conc` streams open over raw
asyncio connections and only counts `data:` events, so it costs far less than the server.
Printed: client-received and server-sent chunks/s over the measured window, and the
server's send lateness (actual send - intended send, from the trace) p50/p99/max.
Target (issue 2): >= 20,000 chunks/s at 512 streams with p99 lateness under 2 ms.
"""

from __future__ import annotations

import argparse
import asyncio
import multiprocessing as mp
import os
import sys
import tempfile
import time
from dataclasses import dataclass
from multiprocessing.synchronize import Event as MpEvent
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from loadgen.sim.config import SimConfig
from loadgen.sim.server import running_simulator
from loadgen.sim.trace import read_trace

MAX_TOKENS = 200_000  # streams outlive the measurement; the client closes them


@dataclass(frozen=True, slots=True)
class ClientResult:
    events: int
    window_start_ns: int
    window_end_ns: int
    connected: int


def pin(core: int) -> None:
    """Pin this process to `core` when the machine has at least two cores to share."""
    if os.environ.get("SIM_BENCH_NO_PIN"):
        return
    if hasattr(os, "sched_setaffinity") and len(os.sched_getaffinity(0)) >= 2:
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[core]})


def new_loop() -> asyncio.AbstractEventLoop:
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def server_main(
    config: SimConfig, ports: mp.Queue[int], stop: MpEvent, profile: bool = False
) -> None:
    pin(0)
    if profile:
        import cProfile
        import pstats

        profiler = cProfile.Profile()
        profiler.enable()
        try:
            server_main(config, ports, stop)
        finally:
            profiler.disable()
            pstats.Stats(profiler).sort_stats("tottime").print_stats(25)
        return
    start_cpu, start_wall = time.process_time(), time.perf_counter()

    async def serve() -> None:
        async with running_simulator(config, port=0) as sim:
            ports.put(sim.port)
            await asyncio.to_thread(stop.wait)

    with asyncio.Runner(loop_factory=new_loop) as runner:
        runner.run(serve())
    print(
        f"server process: {time.process_time() - start_cpu:.1f} s CPU over "
        f"{time.perf_counter() - start_wall:.1f} s wall (startup included)",
        flush=True,
    )


class CountingStream(asyncio.Protocol):
    """Sends one streaming request, then counts `data: ` markers in whatever arrives."""

    def __init__(self, request: bytes, counts: list[int]) -> None:
        self.request = request
        self.counts = counts
        self.tail = b""
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]  # uvloop's is not a subclass
        transport.write(self.request)  # type: ignore[attr-defined]

    def data_received(self, data: bytes) -> None:
        joined = self.tail + data
        self.counts[0] += joined.count(b"data: ")
        self.tail = data[-5:]  # a marker split across reads is counted once, in the next


def http_request(port: int, model: str, index: int) -> bytes:
    body = orjson.dumps(
        {
            "model": model,
            "prompt": [1000 + (index % 500)] * 64,
            "max_tokens": MAX_TOKENS,
            "ignore_eos": True,
            "stream": True,
        }
    )
    return (
        f"POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
        f"Content-Type: application/json\r\nX-Request-Id: bench-{index}\r\n"
        f"Content-Length: {len(body)}\r\n\r\n"
    ).encode() + body


def client_main(
    port: int,
    model: str,
    conc: int,
    warmup: float,
    duration: float,
    results: mp.Queue[ClientResult],
) -> None:
    pin(1)

    async def run() -> ClientResult:
        loop = asyncio.get_running_loop()
        counts = [0]
        transports = []
        for i in range(conc):
            transport, _ = await loop.create_connection(
                lambda i=i: CountingStream(http_request(port, model, i), counts),  # type: ignore[misc]
                "127.0.0.1",
                port,
            )
            transports.append(transport)
        await asyncio.sleep(warmup)
        start_events, start_ns = counts[0], time.perf_counter_ns()
        await asyncio.sleep(duration)
        end_events, end_ns = counts[0], time.perf_counter_ns()
        for transport in transports:
            transport.close()
        return ClientResult(end_events - start_events, start_ns, end_ns, len(transports))

    with asyncio.Runner(loop_factory=new_loop) as runner:
        results.put(runner.run(run()))


def lateness_ms(trace: list[dict[str, Any]], start_ns: int, end_ns: int) -> tuple[np.ndarray, int]:
    late = [
        sent - intended
        for line in trace
        for intended, sent, _ in line["chunks"]
        if start_ns <= intended < end_ns
    ]
    return np.asarray(late, dtype=np.float64) / 1e6, len(late)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conc", type=int, default=512)
    parser.add_argument("--duration", type=float, default=10.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=3.0, help="seconds before measuring")
    parser.add_argument("--step-ms", type=float, default=20.0, help="fixed step time")
    parser.add_argument("--spec-tokens", type=int, default=2)
    parser.add_argument(
        "--spin-us",
        type=float,
        default=1000.0,
        help="busy-wait before each deadline (as `loadgen sim` does)",
    )
    parser.add_argument("--profile", action="store_true", help="cProfile the server")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        trace_path = Path(tmp) / "trace.jsonl"
        config = SimConfig(
            step_fixed_ms=args.step_ms,
            decode_token_us=0.0,
            prefill_token_us=0.0,
            spec_tokens=args.spec_tokens,
            max_num_seqs=max(args.conc, 1),
            max_model_len=MAX_TOKENS + 1024,
            trace_path=str(trace_path),
            spin_us=args.spin_us,
        )
        ctx = mp.get_context("spawn")
        ports: mp.Queue[int] = ctx.Queue()
        results: mp.Queue[ClientResult] = ctx.Queue()
        stop = ctx.Event()
        server = ctx.Process(
            target=server_main, args=(config, ports, stop, args.profile), daemon=True
        )
        server.start()
        try:
            port = ports.get(timeout=60)
            client = ctx.Process(
                target=client_main,
                args=(port, config.model, args.conc, args.warmup, args.duration, results),
                daemon=True,
            )
            client.start()
            result = results.get(timeout=args.warmup + args.duration + 120)
            client.join(30)
            time.sleep(0.5)  # let the server notice the closed streams and trace them
        finally:
            stop.set()
            server.join(60)
            if server.is_alive():
                server.kill()
        trace = read_trace(trace_path)
    late, sent = lateness_ms(trace, result.window_start_ns, result.window_end_ns)
    seconds = (result.window_end_ns - result.window_start_ns) / 1e9
    print(
        f"streams: {result.connected} (step {args.step_ms} ms, K={args.spec_tokens}, "
        f"{len(os.sched_getaffinity(0))} cores)"
    )
    print(f"client received: {result.events / seconds:,.0f} chunks/s over {seconds:.1f} s")
    print(f"server sent:     {sent / seconds:,.0f} chunks/s")
    if sent:
        p50, p99 = np.percentile(late, [50, 99])
        print(f"send lateness:   p50 {p50:.3f} ms  p99 {p99:.3f} ms  max {late.max():.3f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main())
