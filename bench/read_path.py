"""Client CPU per streamed chunk, transport and ingest only, against a lean chunk server.

client_overhead.py measures the whole runner against the simulator, whose own Python
cost makes it fall behind its schedule on a busy machine. This isolates the read path:
a minimal server (its own process, pinned to cpu 1) streams vLLM-shaped chunks
(`token_ids` and continuous usage, ~350 bytes each) to every open stream once per step;
the client (pinned to cpu 0) runs `conc` closed-loop slots through `Transport.send` and
reports its CPU time (user and system) per chunk, by `--http-client`, in one sitting.

Two more "clients" show the floor under the native one: `reads-kernel` and
`reads-uvloop` write the same requests and only read the responses (kernel-stamped
transport, or uvloop's own), waiting for each body's last chunk and parsing nothing --
what reading alone costs per chunk before any de-chunking, framing, decoding or records.

    .venv/bin/python bench/read_path.py --conc 512 --http-client native,aiohttp --runs 3
    .venv/bin/python bench/read_path.py --http-client native,reads-kernel,reads-uvloop
    .venv/bin/python bench/read_path.py --http-client native,native+outputs  # --record-outputs
    perf record -g -p <client pid printed> ...   # to see where the time goes
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from time import perf_counter_ns
from typing import cast

import numpy as np
import orjson

from bench.aiohttp_client import AiohttpStreams, check_private_api, open_stamping_session
from loadgen.client.ingest import Exchange  # noqa: F401  (import cost outside the timing)
from loadgen.client.native import kernel_stamps
from loadgen.client.native.client import NativeStreams
from loadgen.client.native.pool import parse_target
from loadgen.client.stream_client import StreamClient
from loadgen.client.transport import Transport
from loadgen.workload.plan import RequestSpec

CLIENT_CPU, SERVER_CPU = 0, 1
OUTPUTS = "+outputs"  # a client kind's suffix: the same client with --record-outputs


RESPONSE_ID = b"5f0c3a1b2d4e6f70"  # the server replaces it with each response's own


def chunk_bytes(index: int, prompt: int = 256) -> bytes:
    event = {
        "id": "cmpl-" + RESPONSE_ID.decode(),
        "object": "text_completion",
        "created": 1764556800,
        "model": "deepseek-ai/DeepSeek-V4-Flash",
        "choices": [
            {
                "index": 0,
                "text": " the lean path",
                "logprobs": None,
                "finish_reason": None,
                "stop_reason": None,
                "token_ids": [20012, 3110],
            }
        ],
        "usage": {
            "prompt_tokens": prompt,
            "total_tokens": prompt + 2 * index,
            "completion_tokens": 2 * index,
        },
    }
    data = b"data: " + orjson.dumps(event) + b"\n\n"
    return b"%x\r\n%s\r\n" % (len(data), data)


# Each response carries its own id, as vLLM's do (the client refuses a response with
# the previous one's id on its connection): the same bytes, the id's 16 hex digits new.
SERVER = r"""
import asyncio, itertools, sys, uvloop
from bench.read_path import RESPONSE_ID, chunk_bytes
gap_s, chunks = float(sys.argv[1]), int(sys.argv[2])
CHUNKS = [chunk_bytes(i) for i in range(1, chunks + 1)]
IDS = itertools.count()
DONE = b"e\r\ndata: [DONE]\n\n\r\n0\r\n\r\n"
HEAD = (b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n")
streams = {}  # transport -> chunks sent

class Server(asyncio.Protocol):
    def connection_made(self, transport):
        self.transport, self.buf = transport, b""
    def data_received(self, data):
        self.buf += data
        head, sep, rest = self.buf.partition(b"\r\n\r\n")
        if not sep:
            return
        length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
        if len(rest) < length:
            return
        self.buf = rest[length:]
        self.transport.write(HEAD)
        streams[self.transport] = (0, b"%016x" % next(IDS))

async def main():
    loop = asyncio.get_running_loop()
    server = await loop.create_server(Server, "127.0.0.1", 0)
    print(server.sockets[0].getsockname()[1], flush=True)
    while True:
        await asyncio.sleep(gap_s)
        for transport, (sent, rid) in list(streams.items()):
            if sent == chunks:
                transport.write(DONE)
                del streams[transport]
            else:
                transport.write(CHUNKS[sent].replace(RESPONSE_ID, rid))
                streams[transport] = (sent + 1, rid)

uvloop.run(main())
"""


@contextlib.asynccontextmanager
async def chunk_server(gap_ms: float, chunks: int) -> AsyncIterator[str]:
    env = {**os.environ, "PYTHONPATH": os.getcwd()}
    process = subprocess.Popen(  # noqa: ASYNC220 - started once, before anything is timed
        [sys.executable, "-c", SERVER, str(gap_ms / 1e3), str(chunks)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        with contextlib.suppress(OSError):
            os.sched_setaffinity(process.pid, {SERVER_CPU})
        assert process.stdout is not None
        port = int(await asyncio.to_thread(process.stdout.readline))
        yield f"http://127.0.0.1:{port}/v1/completions"
    finally:
        process.kill()
        process.wait()


@contextlib.asynccontextmanager
async def streams_of(kind: str, conc: int) -> AsyncIterator[StreamClient]:
    if kind == "native":
        native = NativeStreams(max_connections=conc)
        yield native
        await native.close()
        return
    check_private_api()
    async with open_stamping_session(max_connections=conc) as session:
        yield AiohttpStreams(session)


_BODY = b"{}" * 200
_LAST_CHUNK = b"0\r\n\r\n"


class Reader(asyncio.Protocol):
    """Reads a response and parses nothing: stamps each read and waits for the body's
    last chunk (the read-only floor)."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.ended: asyncio.Future[None] | None = None
        self.stamp = 0

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        now = perf_counter_ns()
        self.received(data, now, now)

    def received(self, data: bytes, stamp: int, read_ns: int) -> None:
        self.stamp = stamp
        if data.endswith(_LAST_CHUNK) and self.ended is not None:
            self.ended.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.ended is not None and not self.ended.done():
            self.ended.set_exception(exc or ConnectionError("closed"))


Send = Callable[[], Awaitable[int]]  # one request, its response read; returns its chunks


async def read_only_send(
    kind: str, url: str, chunks: int, bridge: kernel_stamps.ClockBridge
) -> Send:
    """A connection of `kind` (reads-kernel, reads-uvloop), and how to send on it; the
    connections share one clock bridge, as the native client's pool does."""
    loop = asyncio.get_running_loop()
    target = parse_target(url)
    host, port = target.origin.host, target.origin.port
    reader = Reader()
    if kind == "reads-kernel":
        await kernel_stamps.open_connection(loop, host, port, reader, bridge)
    else:
        await loop.create_connection(lambda: reader, host, port)
    request = b"POST %s HTTP/1.1\r\nHost: %s\r\nContent-Length: %d\r\n\r\n%s" % (
        target.path,
        target.host_header,
        len(_BODY),
        _BODY,
    )

    async def one() -> int:
        reader.ended = loop.create_future()
        assert reader.transport is not None
        reader.transport.write(request)
        await reader.ended
        return chunks

    return one


async def measure(
    kind: str, conc: int, per_slot: int, gap_ms: float, chunks: int
) -> dict[str, float]:
    request = RequestSpec(index=0, input_len=256, max_tokens=2 * chunks, body=_BODY)
    async with chunk_server(gap_ms, chunks) as url, contextlib.AsyncExitStack() as stack:
        if kind.startswith("reads-"):
            bridge = kernel_stamps.ClockBridge()
            sends = [await read_only_send(kind, url, chunks, bridge) for _ in range(conc)]
        else:
            # `<client>+outputs`: the same client keeping every output (--record-outputs)
            client, keep = kind.removesuffix(OUTPUTS), kind.endswith(OUTPUTS)
            transport = Transport(
                await stack.enter_async_context(streams_of(client, conc)),
                url,
                record_outputs=keep,
            )

            async def send() -> int:
                record = await transport.send(
                    request, x_request_id="x", conc=conc, scheduled_ns=0, on_record=lambda _r: None
                )
                assert record.ok, record.error_detail
                return len(record.chunk_ns)

            sends = [send] * conc
        received = 0

        async def slot(n: int, one: Send) -> None:
            nonlocal received
            for _ in range(n):
                got = await one()  # not `received += await ...`: that reads before the await
                received += got

        async with asyncio.TaskGroup() as group:  # warmup: every connection opened
            for one in sends:
                group.create_task(slot(1, one))
        received = 0
        before, wall = os.times(), time.perf_counter()
        async with asyncio.TaskGroup() as group:
            for one in sends:
                group.create_task(slot(per_slot, one))
        after, wall = os.times(), time.perf_counter() - wall
    user, system = after.user - before.user, after.system - before.system
    return {
        "chunks/s": received / wall,
        "cpu us/chunk": (user + system) / received * 1e6,
        "user us/chunk": user / received * 1e6,
        "sys us/chunk": system / received * 1e6,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conc", type=int, default=512)
    parser.add_argument("--gap-ms", type=float, default=20.0, help="server step interval")
    parser.add_argument("--chunks", type=int, default=120, help="chunks per request")
    parser.add_argument("--per-slot", type=int, default=2, help="measured requests per slot")
    parser.add_argument("--http-client", default="native,aiohttp")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with contextlib.suppress(OSError):
        os.sched_setaffinity(0, {CLIENT_CPU})
    print(
        f"read_path: client pid {os.getpid()} on cpu {CLIENT_CPU}, server on cpu "
        f"{SERVER_CPU}; conc {args.conc}, a chunk per stream every {args.gap_ms} ms"
    )
    import uvloop

    results: dict[str, list[dict[str, float]]] = {k: [] for k in args.http_client.split(",")}
    for run in range(args.runs):
        for kind in results:
            figures = uvloop.run(measure(kind, args.conc, args.per_slot, args.gap_ms, args.chunks))
            results[kind].append(figures)
            print(
                f"run {run + 1} {kind:8} load {os.getloadavg()[0]:4.1f}  "
                + "  ".join(f"{k} {v:,.1f}" for k, v in figures.items()),
                flush=True,
            )
    for kind, rows in results.items():
        print(
            f"{kind}: median [min..max] over {len(rows)} runs: "
            + "  ".join(
                f"{name} {np.median([r[name] for r in rows]):,.1f} "
                f"[{min(r[name] for r in rows):,.1f}..{max(r[name] for r in rows):,.1f}]"
                for name in rows[0]
            )
        )


if __name__ == "__main__":
    main()
