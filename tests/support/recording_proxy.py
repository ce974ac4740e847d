"""A TCP relay on 127.0.0.1 that keeps every byte clients send: what really went on the
wire, to check that redacting what loadgen stores did not change what it sends."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass, field


@dataclass
class Recording:
    port: int = 0
    sent: bytearray = field(default_factory=bytearray)


async def _pump(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, keep: bytearray | None
) -> None:
    try:
        while data := await reader.read(65536):
            if keep is not None:
                keep += data
            writer.write(data)
            await writer.drain()
    except ConnectionError:
        pass
    finally:
        with contextlib.suppress(ConnectionError):
            writer.close()


@contextlib.asynccontextmanager
async def recording_proxy(target_host: str, target_port: int) -> AsyncIterator[Recording]:
    recording = Recording()
    pumps: set[asyncio.Task[None]] = set()

    async def relay(client_r: asyncio.StreamReader, client_w: asyncio.StreamWriter) -> None:
        server_r, server_w = await asyncio.open_connection(target_host, target_port)
        for task in (_pump(client_r, server_w, recording.sent), _pump(server_r, client_w, None)):
            pumps.add(asyncio.create_task(task))

    server = await asyncio.start_server(relay, "127.0.0.1", 0)
    recording.port = server.sockets[0].getsockname()[1]
    try:
        yield recording
    finally:
        server.close()
        for task in pumps:
            task.cancel()
        await asyncio.gather(*pumps, return_exceptions=True)
        await server.wait_closed()
