"""Shard 0's hub: the one place the shards of a `--coordinator` run meet.

It listens at the coordinator's address; each shard (shard 0's own link too) keeps one
connection. A connection whose first frame does not prove the shared secret is closed
without a byte sent. A proven shard with another loadgen version, other settings (all
but the per-shard ones `loadgen merge` lets differ, scale/merge.py) or an index already
taken is refused, and so is the run: nobody has sent a request yet (the shards wait for
`AllJoined` before their preflight).

Then: each point starts when every shard said `Ready` for it (`Go` to all); the first
shard to stop (its `Abort`, its connection closing, or BEATS_LOST_S of silence) is
named in a `Stop` to every other shard; at the end each shard's result files arrive
here, into `<results>/shards/shard_<I>/`, for shard 0 to merge.
"""

from __future__ import annotations

import asyncio
import errno
import socket
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from loadgen.errors import SetupError
from loadgen.results.run_record import PER_SHARD
from loadgen.run.ids import new_run_id
from loadgen.scale.coordinator import wire

BEAT_S = 1.0
BEATS_LOST_S = 30.0  # a peer silent this long (no frame at all) is gone: a loaded
# machine may stall a loop for seconds, and a dead process closes its connection anyway
HELLO_WAIT_S = 10.0  # a connection that proves nothing within this is closed


@dataclass(slots=True)
class _Peer:
    index: int
    writer: asyncio.StreamWriter
    heard: float = field(default_factory=time.monotonic)
    handed_in: bool = False
    gone: bool = False


def _not_here(exc: OSError) -> bool:
    """The host does not resolve, or is not one of this machine's addresses."""
    return isinstance(exc, socket.gaierror) or exc.errno == errno.EADDRNOTAVAIL


def _differences(mine: dict[str, Any], theirs: dict[str, Any]) -> list[str]:
    names = sorted((set(mine) | set(theirs)) - PER_SHARD)
    return [
        f"{n} {theirs.get(n)!r} (shard 0: {mine.get(n)!r})"
        for n in names
        if mine.get(n) != theirs.get(n)
    ]


class Hub:
    def __init__(
        self,
        host: str,
        port: int,
        token: str,
        version: str,
        settings: dict[str, Any],
        count: int,
        results_dir: Path,
        join_wait_s: float,
    ) -> None:
        self.host, self.port = host, port
        self.token = token
        self.version = version
        self.settings = settings
        self.count = count
        self.results_dir = results_dir
        self.join_wait_s = join_wait_s
        self.run_id = new_run_id(time.time())
        self.peers: dict[int, _Peer] = {}
        self.ready: dict[int, set[int]] = {}
        self.stopped: wire.Stop | None = None
        self.all_joined = False
        self.settled = asyncio.Event()  # every shard handed in or is gone
        self.seen: set[int] = set()  # shards that proved the secret (joined or refused)
        self.all_seen = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()

    async def start(self) -> None:
        try:
            self._server = await self._listen(self.host)
        except (socket.gaierror, OSError) as exc:
            if not _not_here(exc):
                raise self._cannot(exc) from None
            # a stable name that does not resolve here yet (a headless Service's record
            # appears after the pod starts) or names a front address: every address
            # of this machine, the secret guarding it as ever
            print(
                f"loadgen: coordinator: {self.host} is not an address of this machine "
                f"(yet); listening on every address at port {self.port}",
                file=sys.stderr,
            )
            try:
                self._server = await self._listen(None)
            except OSError as again:
                raise self._cannot(again) from None
        self._spawn(self._beats())
        self._spawn(self._join_deadline())

    async def _listen(self, host: str | None) -> asyncio.Server:
        return await asyncio.start_server(self._connection, host, self.port, reuse_address=True)

    def _cannot(self, exc: OSError) -> SetupError:
        return SetupError(
            f"--coordinator {self.host}:{self.port}: shard 0 cannot listen there "
            f"({exc.strerror or exc}); give an address of this machine and a free port"
        )

    def _spawn(self, work: Any) -> None:
        task = asyncio.create_task(work)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        for peer in self.peers.values():
            peer.writer.close()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    async def linger(self, deadline: float) -> None:
        """A run stopped while the shards joined: stay until every shard has come and
        been told (or the join deadline), so none waits for a hub that left."""
        remaining = deadline - time.monotonic()
        if remaining > 0 and not self.all_seen.is_set():
            try:
                async with asyncio.timeout(remaining):
                    await self.all_seen.wait()
            except TimeoutError:
                pass

    def gathered(self) -> list[int]:
        """The indices of the shards whose results arrived (shard 0's are its own)."""
        return sorted(i for i, p in self.peers.items() if p.handed_in)

    async def _send(self, peer: _Peer, message: wire.Message) -> None:
        if peer.gone:
            return
        try:
            await wire.send(peer.writer, message)
        except (ConnectionError, OSError):
            await self._lost(peer, "its connection broke")

    async def _broadcast(self, message: wire.Message, but: int | None = None) -> None:
        await asyncio.gather(
            *(self._send(p, message) for i, p in list(self.peers.items()) if i != but)
        )

    async def stop(self, index: int, line: str) -> None:
        """The run stops because of shard `index`: the first such stop is every shard's."""
        if self.stopped is not None:
            return
        self.stopped = wire.Stop(index, line)
        print(f"loadgen: coordinator: shard {index} stopped the run: {line}", file=sys.stderr)
        await self._broadcast(self.stopped)  # the stopping shard too: it waits no more
        self._check_settled()

    async def _lost(self, peer: _Peer, why: str) -> None:
        if peer.gone:
            return
        peer.gone = True
        peer.writer.close()
        if not peer.handed_in:
            await self.stop(
                peer.index,
                f"{why} before it handed in its results (its process ended, or its "
                "machine left the network)",
            )
        self._check_settled()

    def _check_settled(self) -> None:
        if len(self.peers) == self.count and all(
            p.handed_in or p.gone for p in self.peers.values()
        ):
            self.settled.set()
        elif self.stopped is not None and not self.all_joined:
            self.settled.set()  # a run stopped while joining has nothing to hand in

    async def _beats(self) -> None:
        while True:
            await asyncio.sleep(BEAT_S)
            now = time.monotonic()
            for peer in list(self.peers.values()):
                if not peer.gone and now - peer.heard > BEATS_LOST_S:
                    await self._lost(peer, f"it was silent for {BEATS_LOST_S:.0f} s")
            await self._broadcast(wire.Beat())

    async def _join_deadline(self) -> None:
        await asyncio.sleep(self.join_wait_s)
        missing = [i for i in range(self.count) if i not in self.peers]
        if missing:
            await self.stop(
                missing[0],
                f"shard(s) {missing} never joined within {self.join_wait_s:g} s "
                "(--coordinator-wait)",
            )

    async def _connection(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        peer: _Peer | None = None
        try:
            peer = await self._admit(reader, writer)
            if peer is not None:
                await self._serve(peer, reader)
        except (wire.FrameError, ConnectionError, OSError, TimeoutError):
            pass
        finally:
            if peer is not None:
                await self._lost(peer, "its connection closed")
            else:
                writer.close()

    async def _admit(
        self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> _Peer | None:
        """The shard on this connection, once proven and checked; None: closed silently
        (no proof) or refused (said why)."""
        async with asyncio.timeout(HELLO_WAIT_S):
            first = await wire.receive(reader, wire.HELLO_MAX)
        if not isinstance(first, wire.Hello) or not wire.proven(first, self.token):
            return None  # not one of ours: it learns nothing, not even that we are loadgen
        self.seen.add(first.index)
        if len(self.seen) >= self.count:
            self.all_seen.set()
        reason = self._refusal(first)
        if reason is not None:
            await wire.send(writer, wire.Refused(reason))
            await self.stop(first.index, f"refused: {reason}")
            return None
        peer = _Peer(first.index, writer)
        self.peers[first.index] = peer
        await wire.send(writer, wire.Welcome())
        if self.stopped is not None:
            await self._send(peer, self.stopped)
        elif len(self.peers) == self.count:
            self.all_joined = True
            await self._broadcast(wire.AllJoined(self.run_id))
        return peer

    def _refusal(self, hello: wire.Hello) -> str | None:
        if hello.version != self.version:
            return (
                f"shard {hello.index} runs loadgen {hello.version}, shard 0 runs "
                f"{self.version}: run one version on every shard"
            )
        if hello.count != self.count or not 0 <= hello.index < self.count:
            return (
                f"shard {hello.index}/{hello.count} is not a shard of shard 0's "
                f"{self.count}: give every shard the same --shard N"
            )
        if hello.index in self.peers:
            return f"shard {hello.index} joined twice: give each shard its own index"
        different = _differences(self.settings, hello.settings)
        if different:
            return (
                f"shard {hello.index}'s settings differ from shard 0's: "
                f"{'; '.join(different[:4])}: give every shard the same flags"
            )
        return None

    async def _serve(self, peer: _Peer, reader: asyncio.StreamReader) -> None:
        files: dict[str, Path] = {}
        while True:
            message = await wire.receive(reader)
            if message is None:
                return
            peer.heard = time.monotonic()
            match message:
                case wire.Ready(conc):
                    await self._ready(peer.index, conc)
                case wire.Abort(line):
                    await self.stop(peer.index, line)
                case wire.ResultChunk():
                    self._write_chunk(peer.index, message, files)
                case wire.HandedIn():
                    peer.handed_in = True
                    await self._send(peer, wire.Received())
                    self._check_settled()
                case _:
                    pass  # beats

    async def _ready(self, index: int, conc: int) -> None:
        waiting = self.ready.setdefault(conc, set())
        waiting.add(index)
        if len(waiting) == self.count:
            await self._broadcast(wire.Go(conc))

    def shard_dir(self, index: int) -> Path:
        return self.results_dir / "shards" / f"shard_{index}"

    def _write_chunk(self, index: int, chunk: wire.ResultChunk, files: dict[str, Path]) -> None:
        name = PurePosixPath(chunk.name)
        if name.is_absolute() or ".." in name.parts or not name.parts:
            raise wire.FrameError(f"a result file named {chunk.name!r}")
        path = files.get(chunk.name) or self.shard_dir(index).joinpath(*name.parts)
        files[chunk.name] = path
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("wb" if chunk.first else "ab") as out:
            out.write(chunk.data)
