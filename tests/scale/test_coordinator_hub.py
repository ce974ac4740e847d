"""Shard 0's hub over real sockets, in this process: where it listens, and that a
connection without the secret learns nothing."""

from __future__ import annotations

import asyncio
import socket
import time
from pathlib import Path

import pytest
import uvloop

from loadgen.errors import SetupError
from loadgen.run.shard_sync import CoordinatorLost
from loadgen.scale.coordinator import wire
from loadgen.scale.coordinator.hub import Hub
from loadgen.scale.coordinator.link import connect


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def hub(host: str, port: int, tmp_path: Path) -> Hub:
    return Hub(host, port, "secret", "1.0", {"isl": 64}, 1, tmp_path, 30.0)


@pytest.mark.parametrize("host", ["no-such-host.invalid", "192.0.2.1"])
async def test_a_name_that_is_not_here_yet_listens_on_every_address(
    tmp_path: Path, host: str, capsys: pytest.CaptureFixture[str]
) -> None:
    port = free_port()
    listening = hub(host, port, tmp_path)
    await listening.start()
    try:
        assert f"{host} is not an address of this machine" in capsys.readouterr().err
        hello = wire.hello("secret", "1.0", 0, 1, {"isl": 64})
        link = await connect("127.0.0.1", port, hello, tmp_path, time.monotonic() + 10)
        await link.join(time.monotonic() + 10)
        assert link.run_id == listening.run_id
        await link.close()
    finally:
        await listening.close()


async def test_a_port_in_use_is_one_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(SetupError, match="shard 0 cannot listen there"):
            await hub("127.0.0.1", port, tmp_path).start()


async def test_without_the_secret_not_a_byte_comes_back(tmp_path: Path) -> None:
    port = free_port()
    listening = hub("127.0.0.1", port, tmp_path)
    await listening.start()
    try:
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        await wire.send(writer, wire.hello("not-the-secret", "1.0", 0, 1, {"isl": 64}))
        assert await asyncio.wait_for(reader.read(), 10) == b""  # closed, nothing said
        writer.close()
        reader, writer = await asyncio.open_connection("127.0.0.1", port)
        writer.write(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n")  # not even a frame
        assert await asyncio.wait_for(reader.read(), 10) == b""
        writer.close()
        assert listening.peers == {}
    finally:
        await listening.close()


def test_handing_in_to_a_coordinator_that_is_gone_is_coordinator_lost(tmp_path: Path) -> None:
    """On uvloop (loadgen's loop), a write to a closed transport raises RuntimeError: a
    shard whose coordinator died mid-point then printed a traceback after its one line
    (a CI run). The hand-in after the loss must be the loss, said once."""

    async def scenario() -> None:
        port = free_port()
        listening = hub("127.0.0.1", port, tmp_path)
        await listening.start()
        hello = wire.hello("secret", "1.0", 0, 1, {"isl": 64})
        link = await connect("127.0.0.1", port, hello, tmp_path, time.monotonic() + 10)
        try:
            await link.join(time.monotonic() + 10)
            await listening.close()  # the coordinator's end of the connection goes
            with pytest.raises(CoordinatorLost):
                await link.watch()
            # the sweep's next barrier writes into the dead connection: the peer's reset
            # closes the transport (loopback: at once, seen on the loop's next turns)
            with pytest.raises(CoordinatorLost):
                await link.wait(8)
            for _ in range(100):
                if link.writer.is_closing():
                    break
                await asyncio.sleep(0.01)
            assert link.writer.is_closing()
            with pytest.raises(CoordinatorLost, match="is gone"):
                await link.hand_in()
        finally:
            await link.close()

    uvloop.run(scenario())
