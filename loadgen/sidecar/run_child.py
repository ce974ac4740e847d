"""One sidecar run in a process of its own: `python -m loadgen.sidecar.run_child FD`, started
by sidecar/run_process.py for each accepted POST /v1/runs.

A run builds each point's prompts and holds its records in memory (bounded per point by
the memory estimate of config/limits.py, which may reach half the machine): in the
sidecar's own process that grew the process serving /healthz, /metrics and every other
run's record until the OOM killer chose. Here the run grows only this process, which
volunteers as the OOM killer's first choice; the sidecar stays at its own size and
reports a child that died as a failed run.

It is a fresh interpreter (spawned: the sidecar's tokenizer runs threads a fork would
copy mid-flight). Its job (the service settings, the run's options with their secrets,
the kind of run) arrives pickled over a private socketpair; every observer hook goes
back as one line of JSON (run_process.py replays them on the sidecar's progress and
live metrics). SIGTERM cancels the run as DELETE did in-process: the engine keeps what
it measured, then the child reports and exits. The sidecar going away (the socket
closes) cancels it too.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import pickle
import signal
import socket
import struct
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, NoReturn

import orjson

from loadgen.records import RequestRecord
from loadgen.results.point import PointResult
from loadgen.sidecar.settings import ServiceConfig

JOB_HEADER = struct.Struct(">I")  # the pickled job's length, then the job
# The OOM killer's choice among the machine's processes: this one first (a process may
# always raise its own score without privileges).
OOM_SCORE_ADJ = 1000
FLUSH_S = 0.1
CLOSE_TIMEOUT_S = 30.0  # the sidecar reading the last lines (gone: the socket errors at once)
RunKind = Literal["sweep", "lanes"]


@dataclass(frozen=True, slots=True)
class RunJob:
    config: ServiceConfig
    options: dict[str, Any]  # the real ones (secrets included): never on a command line
    results_dir: Path
    kind: RunKind


class ParentLink:
    """The child's RunObserver: each hook one JSON line to the sidecar. Request starts and
    loop-lag samples are batched every FLUSH_S (they are many and only counted)."""

    def __init__(self, writer: asyncio.StreamWriter) -> None:
        self.writer = writer
        self._started: dict[int, int] = {}
        self._lag: list[float] = []
        self._timer: asyncio.TimerHandle | None = None

    def send(self, event: str, **fields: Any) -> None:
        if not self.writer.is_closing():
            self.writer.write(orjson.dumps({"e": event, **fields}) + b"\n")

    def flush(self) -> None:
        for conc, n in self._started.items():
            self.send("started", conc=conc, n=n)
        self._started.clear()
        if self._lag:
            self.send("lag", s=self._lag)
            self._lag = []

    def start_flushing(self) -> None:
        self.flush()
        self._timer = asyncio.get_running_loop().call_later(FLUSH_S, self.start_flushing)

    def stop_flushing(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
        self.flush()

    def lane(self, endpoint: str, points: int, spec_tokens: int | None) -> None:
        self.flush()
        self.send("lane", endpoint=endpoint, points=points, spec_tokens=spec_tokens)

    # ---- RunObserver ----------------------------------------------------------------
    def point_started(self, conc: int, num_requests: int) -> None:
        self.flush()
        self.send("point_started", conc=conc, n=num_requests)

    def request_started(self, conc: int) -> None:
        self._started[conc] = self._started.get(conc, 0) + 1

    def request_finished(self, record: RequestRecord) -> None:
        self.flush()  # the sidecar sees a request start before it sees it end
        self.writer.write(b'{"e":"record","r":' + record.to_json() + b"}\n")

    def point_finished(self, conc: int, result: PointResult) -> None:
        self.flush()
        self.writer.write(
            orjson.dumps(
                {"e": "point_finished", "conc": conc, "result": result.to_json()},
                option=orjson.OPT_SERIALIZE_NUMPY,
            )
            + b"\n"
        )

    def loop_lag(self, seconds: float) -> None:
        self._lag.append(seconds)

    def session_started(self, conc: int, root: bool) -> None:
        self.flush()
        self.send("session_started", conc=conc, root=root)

    def session_finished(self, conc: int, root: bool) -> None:
        self.flush()
        self.send("session_finished", conc=conc, root=root)


async def _sweep(job: RunJob, link: ParentLink) -> None:
    from loadgen.orchestrate.measure import measure
    from loadgen.sidecar.options import spec_for
    from loadgen.tokenizer import load_tokenizer

    spec = spec_for(job.config, job.options, job.results_dir)
    link.lane(spec.target.endpoint, len(spec.load.conc), spec.scoring.spec_tokens)
    await measure(spec, observer=link, tokenizer=await asyncio.to_thread(load_tokenizer))


async def _lanes(job: RunJob, link: ParentLink) -> None:
    from loadgen.config.sweepfile import Lane
    from loadgen.orchestrate.lanes import run_lanes
    from loadgen.sidecar.options import plan_for
    from loadgen.tokenizer import load_tokenizer

    plan = plan_for(job.config, job.options, job.results_dir)

    def observer_for(lane: Lane) -> ParentLink:
        link.lane(
            lane.spec.target.endpoint, len(lane.spec.load.conc), lane.spec.scoring.spec_tokens
        )
        return link

    outcome = await run_lanes(
        plan, observer_for=observer_for, tokenizer=await asyncio.to_thread(load_tokenizer)
    )
    failed = [lane.name for lane in outcome.lanes if lane.state == "failed"]
    if failed:
        raise RuntimeError(f"lanes failed: {', '.join(failed)} (see results/lanes.json)")


async def _until_parent_gone(reader: asyncio.StreamReader) -> None:
    with contextlib.suppress(ConnectionError):
        while await reader.read(4096):
            pass


async def _serve(sock: socket.socket) -> NoReturn:
    reader, writer = await asyncio.open_connection(sock=sock, limit=1 << 20)
    size = JOB_HEADER.unpack(await reader.readexactly(JOB_HEADER.size))[0]
    job: RunJob = pickle.loads(await reader.readexactly(size))  # our parent, a socketpair
    link = ParentLink(writer)
    run = asyncio.ensure_future(_sweep(job, link) if job.kind == "sweep" else _lanes(job, link))
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGTERM, run.cancel)
    watch = asyncio.ensure_future(_until_parent_gone(reader))
    watch.add_done_callback(lambda _: run.cancel())
    link.start_flushing()
    code = 0
    try:
        await run
        link.stop_flushing()
        link.send("done")
    except asyncio.CancelledError:
        link.stop_flushing()
        link.send("cancelled")
    except Exception as exc:  # the run's failure, reported as the in-process run did
        link.stop_flushing()
        link.send("failed", error=f"{type(exc).__name__}: {exc}")
        code = 1
    watch.cancel()
    # every line sent before the exit below: drain() leaves up to its low-water mark
    # buffered, which os._exit would drop (the last point's line and "done" among them)
    writer.close()
    with contextlib.suppress(ConnectionError, TimeoutError):
        await asyncio.wait_for(writer.wait_closed(), CLOSE_TIMEOUT_S)
    # Now, not at the loop's close, which waits for the executor: a cancelled plan may
    # still be building in a thread, work nobody will read. The engine's files are
    # written (synchronously) by now.
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def main(argv: list[str]) -> int:
    import uvloop

    # the sidecar stops us (SIGTERM, or its socket closing); its terminal's signals are its
    for sig in (signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    with contextlib.suppress(OSError):
        Path("/proc/self/oom_score_adj").write_text(str(OOM_SCORE_ADJ))
    uvloop.run(_serve(socket.socket(fileno=int(argv[0]))))
    return 2  # not reached: _serve ends the process


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
