"""A TCP relay that delays every byte by a one-way delay with jitter, in both directions:
the links between network namespaces where the kernel has no `netem` qdisc.

    python delay_relay.py --delay-ms 20 --jitter-ms 5 LISTEN_HOST:PORT=TARGET_HOST:PORT ...

Each chunk read is released `delay ± jitter` after it arrived, never before the chunk
read before it (TCP does not reorder). A side that closes is closed on the other side
after the same delay. Prints `ready` once every listener is up.
"""

from __future__ import annotations

import argparse
import asyncio
import random
import socket
import struct


class Direction:
    def __init__(self, delay_s: float, jitter_s: float, rng: random.Random) -> None:
        self.delay_s, self.jitter_s, self.rng = delay_s, jitter_s, rng

    async def run(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[tuple[float, bytes | None]] = asyncio.Queue()
        release = asyncio.create_task(self._release(queue, writer))
        last = 0.0
        try:
            while True:
                try:
                    data = await reader.read(1 << 16)
                except ConnectionError:
                    data = b""
                jitter = self.rng.uniform(-self.jitter_s, self.jitter_s)
                last = max(loop.time() + self.delay_s + jitter, last)
                queue.put_nowait((last, data or None))
                if not data:
                    break
            await release
        finally:
            release.cancel()

    async def _release(
        self, queue: asyncio.Queue[tuple[float, bytes | None]], writer: asyncio.StreamWriter
    ) -> None:
        loop = asyncio.get_running_loop()
        try:
            while True:
                at, data = await queue.get()
                wait = at - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
                if data is None:
                    return
                writer.write(data)
                await writer.drain()
        except ConnectionError:
            return
        finally:
            writer.close()


async def serve(listen: str, target: str, delay_s: float, jitter_s: float) -> asyncio.Server:
    host, _, port = listen.rpartition(":")
    to_host, _, to_port = target.rpartition(":")
    rng = random.Random(f"{listen}={target}")

    async def relay(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            up_reader, up_writer = await asyncio.open_connection(to_host, int(to_port))
        except OSError:  # refused upstream: reset, as a refused connect would be
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return
        await asyncio.gather(
            Direction(delay_s, jitter_s, rng).run(reader, up_writer),
            Direction(delay_s, jitter_s, rng).run(up_reader, writer),
            return_exceptions=True,
        )

    return await asyncio.start_server(relay, host, int(port), reuse_address=True)


async def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--delay-ms", type=float, required=True)
    parser.add_argument("--jitter-ms", type=float, default=0.0)
    parser.add_argument("routes", nargs="+", metavar="LISTEN=TARGET")
    args = parser.parse_args()
    servers = []
    for route in args.routes:
        listen, target = route.split("=")
        servers.append(await serve(listen, target, args.delay_ms / 1e3, args.jitter_ms / 1e3))
    print("ready", flush=True)
    await asyncio.gather(*(s.serve_forever() for s in servers))


if __name__ == "__main__":
    asyncio.run(main())
