"""A worker process: `python -m loadgen.scale.worker_process FD`, started by scale/pool_driver.py.

It is a fresh interpreter (spawned, never forked: the parent's tokenizer runs threads that
a fork would copy mid-flight) with its own uvloop, its own aiohttp session and
connections. It loads the tokenizer, builds its own share of each point's prompts from the
seed, and runs that share with the same `Point` code as a single-process run; every
record goes to the parent the moment it ends. Loop-lag samples and request starts are
batched every FLUSH_S. Ctrl-C is the parent's to handle (the worker is in its own session
and ignores SIGINT); when the parent goes away the socket closes and the worker stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import pickle
import signal
import socket
import sys
from collections.abc import Awaitable
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import orjson
from tokenizers import Tokenizer

from loadgen.client.http_session import open_session
from loadgen.client.preflight import ServerInfo
from loadgen.config.spec import RunSpec
from loadgen.records import RequestRecord
from loadgen.run.backend import HttpBackend, open_native_streams, request_headers
from loadgen.run.observers import QuietObserver
from loadgen.run.point import Point
from loadgen.run.point_records import RunContext
from loadgen.run.session_point import SessionPoint, replay_counts, session_replay
from loadgen.run.shares import Share
from loadgen.scale.frames import Kind, frame, message, read_frame
from loadgen.tokenizer import load_tokenizer
from loadgen.workload.plan import Workload
from loadgen.workload.session_plan import SessionSource, session_source

FLUSH_S = 0.1
Command = tuple[Kind, bytes] | None  # None: the parent closed the connection


@dataclass(frozen=True, slots=True)
class WorkerConfig:
    spec: RunSpec  # base_url set (the parent started any simulator), one process
    server: ServerInfo  # the parent's preflight: options the server accepted
    run_id: str
    target: str
    share: Share
    cpu: int | None  # pin to this CPU (--cpu-affinity)


class ParentLink(QuietObserver):
    """The worker's RunObserver and record sink: everything goes to the parent."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self._started = 0
        self._lag_ns: list[int] = []
        self._timer: asyncio.TimerHandle | None = None

    def send(self, kind: Kind, body: dict[str, Any] | None = None) -> None:
        self.writer.write(message(kind, body))

    def record(self, record: RequestRecord) -> None:
        self._flush_started()  # the parent sees a request start before it sees it end
        self.writer.write(frame(Kind.RECORD, record.to_json()))

    def _flush_started(self) -> None:
        if self._started:
            self.send(Kind.STARTED, {"n": self._started})
            self._started = 0

    def tainted(self, found: dict[tuple[int, int], str]) -> None:
        if found:
            rows = [[request_id, start_ns, why] for (request_id, start_ns), why in found.items()]
            self.send(Kind.TAINTED, {"tainted": rows})

    def flush(self) -> None:
        self._flush_started()
        if self._lag_ns:
            self.send(Kind.LAG, {"ns": self._lag_ns})
            self._lag_ns = []

    def start_flushing(self) -> None:
        self.flush()
        self._timer = asyncio.get_running_loop().call_later(FLUSH_S, self.start_flushing)

    def stop_flushing(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self.flush()

    # ---- RunObserver ----------------------------------------------------------------
    def point_started(self, conc: int, num_requests: int) -> None:
        pass  # the parent starts the point

    def request_started(self, conc: int) -> None:
        self._started += 1

    def request_finished(self, record: RequestRecord) -> None:
        pass  # records go through record()

    def loop_lag(self, seconds: float) -> None:
        self._lag_ns.append(round(seconds * 1e9))

    def session_started(self, conc: int, root: bool) -> None:
        pass  # live session gauges are not forwarded to the parent (docs/sessions.md)


async def _until_stopped(work: Awaitable[None], commands: asyncio.Queue[Command]) -> bool:
    """Run `work` unless the parent says STOP (or goes away) first; True when stopped."""
    task = asyncio.ensure_future(work)
    command = asyncio.ensure_future(commands.get())
    await asyncio.wait({task, command}, return_when=asyncio.FIRST_COMPLETED)
    if not command.done():
        command.cancel()
        await task  # its own exception, if any, is the worker's failure
        return False
    _requeue_exit(commands, command.result())
    task.cancel()
    with contextlib.suppress(asyncio.CancelledError):
        await task
    return True


def _requeue_exit(commands: asyncio.Queue[Command], command: Command) -> None:
    """An EXIT (or the parent gone) also ends the point, and then the worker."""
    if command is None or command[0] is Kind.EXIT:
        commands.put_nowait(command)


class Worker:
    def __init__(
        self,
        config: WorkerConfig,
        link: ParentLink,
        context: RunContext,
        workload: Workload | SessionSource,
        commands: asyncio.Queue[Command],
        tokenizer: Tokenizer,
    ) -> None:
        self.config = config
        self.link = link
        self.context = context
        self.workload = workload  # a session run's source of trees, or the requests
        self.commands = commands
        self.tokenizer = tokenizer

    async def serve(self) -> None:
        while (command := await self.commands.get()) is not None:
            kind, body = command
            if kind is Kind.EXIT:
                return
            if kind is Kind.POINT:
                point = orjson.loads(body)
                await self.point(
                    int(point["conc"]), int(point["seed"]), point["trial"], bool(point["fresh"])
                )
            # a STOP or GO for a point that already ended: nothing to stop

    async def _build(
        self, conc: int, context: RunContext, workload: Workload | SessionSource
    ) -> Point:
        share = self.config.share
        if isinstance(workload, SessionSource):
            replay = await session_replay(context, conc, workload, self.tokenizer, share)
            return SessionPoint(context, conc, replay, on_record=self.link.record, share=share)
        plan = await asyncio.to_thread(workload.point, conc, share.owner(conc))
        return Point(
            context,
            plan,
            on_record=self.link.record,
            slots=len(share.slots(conc)),
            label=share.label,
        )

    async def point(self, conc: int, seed: int, trial: int | None, fresh: bool) -> None:
        """One point's share; `seed` and `trial` are the run's, or a --trials trial's
        (`fresh`: a trial after the first, which starts on new connections)."""
        context, workload = self.context, self.workload
        if trial is not None:  # its seed, and its trial in every X-Request-Id
            context = dataclasses.replace(context, trial=trial, spec=context.spec.with_(seed=seed))
            if isinstance(workload, Workload):
                workload = workload.reseeded(seed)
        fresh_connections = getattr(context.backend, "fresh_connections", None)
        if fresh and fresh_connections is not None:
            fresh_connections()
        point = await self._build(conc, context, workload)
        stopped = await _until_stopped(point.warm_up(), self.commands)
        if not stopped:
            self.link.send(Kind.WARM, {"warmup_failed": point.warmup_failed})
            command = await self.commands.get()
            _requeue_exit(self.commands, command)
            if command is not None and command[0] is Kind.GO:
                at_ns = int(orjson.loads(command[1])["at_ns"])
                self.link.start_flushing()
                try:
                    await _until_stopped(self._measure_at(point, at_ns), self.commands)
                finally:
                    self.link.stop_flushing()
        take = getattr(context.backend, "take_tainted", None)  # before DONE: the point's own
        if take is not None:
            self.link.tainted(take())
        health = point.health()
        replay = replay_counts(point.replay.stats) if isinstance(point, SessionPoint) else None
        self.link.send(
            Kind.DONE,
            {
                "warmup_failed": point.warmup_failed,
                "replay": replay,
                "health": {
                    "label": health.label,
                    "requests": health.requests,
                    "chunks": health.chunks,
                    "cpu_seconds": health.cpu_seconds,
                    "lag_ns": list(health.lag_ns),
                    "event_loop": health.event_loop,
                },
            },
        )
        await self.link.writer.drain()

    async def _measure_at(self, point: Point, at_ns: int) -> None:
        """Every worker starts its measured phase at the same instant (one clock)."""
        delay = at_ns - perf_counter_ns()
        if delay > 0:
            await asyncio.sleep(delay / 1e9)
        await point.measure()


async def _forward_taints(backend: HttpBackend, link: ParentLink) -> None:
    """Taints come when bytes arrive on an idle connection, after the record went to the
    parent (and may be after DONE, while the parent still ends the point): looked for
    every FLUSH_S for the worker's whole life; the parent applies those of its current
    point (scale/pool.py), as a single process applies its own when the point ends."""
    while True:
        await asyncio.sleep(FLUSH_S)
        link.tainted(backend.take_tainted())


async def _read_commands(reader: asyncio.StreamReader, commands: asyncio.Queue[Command]) -> None:
    while (command := await read_frame(reader)) is not None:
        commands.put_nowait(command)
    commands.put_nowait(None)


async def _serve(sock: socket.socket) -> int:
    reader, writer = await asyncio.open_connection(sock=sock)
    first = await read_frame(reader)
    if first is None or first[0] is not Kind.CONFIG:
        return 2
    config: WorkerConfig = pickle.loads(first[1])  # from our parent, over a socketpair
    link = ParentLink(writer)
    try:
        await _work(config, link, reader)
    except Exception as exc:  # reported to the parent, which ends the run with it
        link.send(Kind.FAILED, {"error": f"{type(exc).__name__}: {exc}"})
        await writer.drain()
        return 1
    finally:
        writer.close()
    return 0


async def _work(config: WorkerConfig, link: ParentLink, reader: asyncio.StreamReader) -> None:
    spec = config.spec
    if config.cpu is not None:
        os.sched_setaffinity(0, {config.cpu})
    tokenizer = await asyncio.to_thread(
        load_tokenizer, spec.target.tokenizer, check_dsv4=spec.workload.encoder == "dsv4"
    )
    workload: Workload | SessionSource = (
        await asyncio.to_thread(session_source, spec, tokenizer)
        if spec.sessions
        else Workload(spec, tokenizer, config.server.options)
    )
    slots = max(len(config.share.slots(conc)) for conc in spec.load.conc) or 1
    commands: asyncio.Queue[Command] = asyncio.Queue()
    async with (
        open_session(
            max_connections=slots,
            headers=request_headers(spec),
            timeout_s=spec.deadlines.http_timeout_s,
        ) as session,
        open_native_streams(spec, slots) as streams,
    ):
        backend = HttpBackend(spec, session, config.target, tokenizer, streams)
        backend.adopt(config.server)
        context = RunContext(
            spec,
            backend,
            config.server,
            config.run_id,
            Path("."),
            link,
            perf_counter_ns,
            asyncio.sleep,
        )
        link.send(Kind.READY, {"pid": os.getpid()})
        async with asyncio.TaskGroup() as group:
            listener = group.create_task(_read_commands(reader, commands))
            taints = group.create_task(_forward_taints(backend, link))
            await Worker(config, link, context, workload, commands, tokenizer).serve()
            listener.cancel()
            taints.cancel()


def main(argv: list[str]) -> int:
    import uvloop

    for sig in (signal.SIGINT, signal.SIGHUP):  # the parent stops us (STOP, EXIT, EOF)
        signal.signal(sig, signal.SIG_IGN)
    sock = socket.socket(fileno=int(argv[0]))
    return int(uvloop.run(_serve(sock)))


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
