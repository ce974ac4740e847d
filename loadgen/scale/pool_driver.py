"""`--workers N`: N client processes on this machine, one result.

The parent checks the server (preflight), starts any embedded simulator and then N
worker processes (scale/worker_process.py), each on its own socketpair; scale/pool.py runs each
point on them, and `PoolDriver` is the engine's Driver (run/driver.py) over the pool.
`--workers auto` is resolved here, before the run starts.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import pickle
import socket
import subprocess
import sys
from collections.abc import AsyncIterator

from loadgen.config.spec import RunSpec
from loadgen.results.outcome import PointOutcome
from loadgen.run.driver import Driver, Lives, RunPieces
from loadgen.run.features import Features
from loadgen.run.features.session_fields import SessionFields
from loadgen.run.lifecycle import PointLife
from loadgen.run.point_records import RunContext
from loadgen.run.shares import Share
from loadgen.scale.frames import Kind, frame
from loadgen.scale.pool import Handle, Lost, WorkerDied, WorkerPool
from loadgen.scale.worker_process import WorkerConfig
from loadgen.workload.session_plan import SessionSource

START_TIMEOUT_S = 120.0  # import, tokenizer load, word pool: a few seconds, more when busy
STREAMS_PER_WORKER = 128  # bench/client_overhead.py: receive lag grows with streams/process


__all__ = [
    "PoolDriver",
    "WorkerDied",
    "WorkerPool",
    "choose_workers",
    "pool_drive",
    "resolve_workers",
    "worker_pool",
]


def choose_workers(spec: RunSpec, cpus: int) -> tuple[int, str]:
    """`--workers auto`: one worker per STREAMS_PER_WORKER streams of this run's largest
    point, within the cores left after the parent (and an embedded simulator)."""
    share = Share(spec.processes.shard_index, spec.processes.shard_count)
    streams = max(len(share.shard_slots(conc)) for conc in spec.load.conc)
    spare = cpus - 1 - (1 if spec.sim else 0)
    wanted = math.ceil(streams / STREAMS_PER_WORKER)
    count = max(1, min(spare, wanted))
    why = (
        f"{cpus} cores available, 1 kept for the parent"
        f"{' and 1 for the embedded simulator' if spec.sim else ''}; the largest point "
        f"has {streams} streams here, up to {STREAMS_PER_WORKER} per worker"
    )
    return count, why


def resolve_workers(spec: RunSpec) -> RunSpec:
    """The spec with `--workers auto` replaced by the count chosen (and said so)."""
    if spec.processes.workers is not None:
        return spec
    if spec.sessions and (
        spec.workload.dataset_format == "mooncake" or not spec.session.cache_bust
    ):
        print(
            "loadgen: --workers auto: 1 process (this one): a Mooncake trace or "
            "--no-cache-bust is played by one process",
            file=sys.stderr,
        )
        return spec.with_(workers=1, cpu_affinity=())
    count, why = choose_workers(spec, len(os.sched_getaffinity(0)))
    noun = "process (this one)" if count == 1 else "worker processes"
    print(f"loadgen: --workers auto: {count} {noun} ({why})", file=sys.stderr)
    return spec.with_(workers=count, cpu_affinity=spec.processes.cpu_affinity if count > 1 else ())


def _spawn(index: int) -> tuple[subprocess.Popen[bytes], socket.socket]:
    ours, theirs = socket.socketpair()
    try:
        process = subprocess.Popen(
            [sys.executable, "-m", "loadgen.scale.worker_process", str(theirs.fileno())],
            pass_fds=(theirs.fileno(),),
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )  # Ctrl-C reaches the parent only; it stops the workers
    finally:
        theirs.close()
    return process, ours


@contextlib.asynccontextmanager
async def worker_pool(context: RunContext) -> AsyncIterator[WorkerPool]:
    """Start `spec.workers` worker processes; stop them all on exit, whatever happened."""
    spec = context.spec
    backend = context.backend
    assert spec.processes.workers is not None
    pool = WorkerPool(context, Share(spec.processes.shard_index, spec.processes.shard_count))
    # (the parent samples --gpu-metrics: workers only send.) A worker sees only its share
    # of the arrivals: the over-saturation stop is not judged across workers
    # (docs/results.md), so a worker never stops its share alone.
    worker_spec = spec.with_(
        base_url=backend.base_url,
        sim=False,
        sim_args=(),
        serve_cmd=(),  # the parent launched it (--serve-cmd)
        serve_env=(),
        serve_cwd=None,
        workers=1,
        cpu_affinity=(),
        gpu_metrics=(),
        saturation_stop=False,
    )
    try:
        for index in range(spec.processes.workers):
            share = pool.share.worker_share(index, spec.processes.workers)
            process, sock = _spawn(index)
            reader, writer = await asyncio.open_connection(sock=sock)
            handle = Handle(index, process, reader, writer, share)
            pool.handles.append(handle)
            cpu = (
                spec.processes.cpu_affinity[index % len(spec.processes.cpu_affinity)]
                if spec.processes.cpu_affinity
                else None
            )
            config = WorkerConfig(
                worker_spec, context.server, context.run_id, backend.target, share, cpu
            )
            writer.write(frame(Kind.CONFIG, pickle.dumps(config)))
            handle.reader_task = asyncio.create_task(pool._listen(handle))
        await _wait_ready(pool)
        yield pool
    finally:
        await _shut_down(pool)


async def _wait_ready(pool: WorkerPool) -> None:
    try:
        await asyncio.wait_for(pool._collect(pool.handles, Kind.READY), START_TIMEOUT_S)
    except Lost as lost:
        reason = str(lost) or await lost.handle.death()
        raise WorkerDied(f"{reason} while starting") from None
    except TimeoutError:
        raise WorkerDied(
            f"the worker processes did not start within {START_TIMEOUT_S:.0f} s"
        ) from None


async def _shut_down(pool: WorkerPool) -> None:
    for handle in pool.handles:
        handle.send(Kind.EXIT)
    for handle in pool.handles:
        with contextlib.suppress(ConnectionError, RuntimeError):
            await handle.writer.drain()
        try:
            await asyncio.to_thread(handle.process.wait, 10)
        except subprocess.TimeoutExpired:
            handle.process.kill()
            await asyncio.to_thread(handle.process.wait)
        handle.writer.close()
        if handle.reader_task is not None:
            handle.reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await handle.reader_task


class PoolDriver(Lives):
    """The engine's Driver over the worker pool: each point (or trial) on the workers."""

    def __init__(
        self, pool: WorkerPool, sessions: SessionSource | None, features: Features
    ) -> None:
        super().__init__()
        self.pool = pool
        self.sessions = sessions
        self.features = features

    async def run_point(self, context: RunContext, conc: int) -> PointOutcome:
        sending = await self.pool.sending(context, conc, self.sessions)
        extra = (
            (SessionFields(context.spec, sending.replay_counts),)
            if self.sessions is not None
            else ()
        )
        extensions = self.features.for_point(context, conc, extra)
        life = PointLife(context, conc, lambda _records: sending, extensions)
        self.pool.current = life
        try:
            return await self.run(life)
        finally:
            self.pool.current = None


@contextlib.asynccontextmanager
async def pool_drive(pieces: RunPieces) -> AsyncIterator[Driver]:
    """The engine's `Drive` for --workers N: the pool started, and stopped at the end."""
    async with worker_pool(pieces.context) as pool:
        yield PoolDriver(pool, pieces.sessions, pieces.features)
