"""The sidecar's side of a run's own process (sidecar/run_child.py): start it, replay its
observer hooks on the run's progress and the live metrics, stop it on DELETE.

The sidecar itself never builds a plan or holds a point's records: its memory is what it
has at rest plus one record line being replayed, whatever a run asks for within the
limits (tests/sidecar/test_service_run_process.py measures it). A child that dies (the
OOM killer's first choice: it asks to be) is a failed run with the signal named.
"""

from __future__ import annotations

import asyncio
import contextlib
import pickle
import signal
import socket
import sys
from collections.abc import Callable

import orjson

from loadgen.records import RequestRecord
from loadgen.results.point import point_from_json
from loadgen.run.observers import FanoutObserver, RunObserver
from loadgen.sidecar.run_child import JOB_HEADER, RunJob
from loadgen.sidecar.runs import ProgressObserver, RunFailed
from loadgen.sinks.prometheus import MetricsObserver

# One hook a line; a record of a 100k-token answer is ~2 MB.
MAX_LINE_BYTES = 64 << 20
# After SIGTERM the engine writes what it measured; then it is killed.
STOP_GRACE_S = 60.0
# (endpoint, points, K) -> the live-metrics observer of one sweep or lane
MetricsFor = Callable[[str, int, int | None], MetricsObserver]
SOURCE = "the run's process"


class _Replay:
    """The child's hook lines -> the progress observer and the current lane's metrics."""

    def __init__(self, progress: ProgressObserver, metrics_for: MetricsFor) -> None:
        self.progress = progress
        self.metrics_for = metrics_for
        self.metrics: MetricsObserver | None = None
        self.observer: RunObserver = FanoutObserver(progress)
        self.ended: str | None = None  # done, cancelled or failed
        self.error: str | None = None

    def finished(self) -> None:
        if self.metrics is not None:
            self.metrics.finished()
            self.metrics = None

    def line(self, raw: bytes) -> None:
        event = orjson.loads(raw)
        kind, o = event["e"], self.observer
        if kind == "record":
            o.request_finished(RequestRecord.from_dict(event["r"]))
        elif kind == "started":
            for _ in range(int(event["n"])):
                o.request_started(int(event["conc"]))
        elif kind == "lag":
            for seconds in event["s"]:
                o.loop_lag(float(seconds))
        elif kind == "point_started":
            o.point_started(int(event["conc"]), int(event["n"]))
        elif kind == "point_finished":
            o.point_finished(int(event["conc"]), point_from_json(event["result"], SOURCE))
        elif kind == "session_started":
            o.session_started(int(event["conc"]), bool(event["root"]))
        elif kind == "session_finished":
            o.session_finished(int(event["conc"]), bool(event["root"]))
        elif kind == "lane":  # the previous lane's series: nothing in flight any more
            self.finished()
            self.metrics = self.metrics_for(
                event["endpoint"], int(event["points"]), event["spec_tokens"]
            )
            self.observer = FanoutObserver(self.progress, self.metrics)
        elif kind in ("done", "cancelled", "failed"):
            self.ended, self.error = kind, event.get("error")


async def _replay(reader: asyncio.StreamReader, replay: _Replay) -> None:
    with contextlib.suppress(ConnectionError):  # the child gone: its exit status says why
        while raw := await reader.readline():
            replay.line(raw)


def _died(returncode: int) -> str:
    if returncode < 0:
        name = signal.Signals(-returncode).name
        why = " (out of memory?)" if name == "SIGKILL" else ""
        return f"the run's process was ended by {name}{why}; what it finished is kept"
    return f"the run's process exited with status {returncode} before reporting"


async def _reap(process: asyncio.subprocess.Process) -> None:
    """The child's exit (it has sent its last line); killed if it does not come."""
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(process.wait(), 5.0)
    if process.returncode is None:
        with contextlib.suppress(ProcessLookupError):
            process.kill()
        await process.wait()


async def run_in_child(job: RunJob, progress: ProgressObserver, metrics_for: MetricsFor) -> None:
    """Run `job` in its own process; returns when it succeeded, raises RunFailed with its
    line when it failed, CancelledError (after the child has flushed) when cancelled."""
    ours, theirs = socket.socketpair()
    try:
        process = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            "loadgen.sidecar.run_child",
            str(theirs.fileno()),
            pass_fds=(theirs.fileno(),),
            start_new_session=True,  # Ctrl-C on the sidecar's terminal is the sidecar's
        )
    finally:
        theirs.close()
    reader, writer = await asyncio.open_connection(sock=ours, limit=MAX_LINE_BYTES)
    payload = pickle.dumps(job)
    writer.write(JOB_HEADER.pack(len(payload)) + payload)
    replay = _Replay(progress, metrics_for)
    reading = asyncio.ensure_future(_replay(reader, replay))
    try:
        await asyncio.shield(reading)
    except asyncio.CancelledError:  # DELETE or the sidecar stopping: the child flushes
        with contextlib.suppress(ProcessLookupError):
            process.send_signal(signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(reading), STOP_GRACE_S)
        raise
    finally:
        await _reap(process)
        reading.cancel()
        writer.close()
        replay.finished()
    if replay.ended == "failed":
        raise RunFailed(replay.error or "the run failed")
    if replay.ended == "cancelled":
        raise RunFailed("the run's process was stopped from outside the sidecar")
    if replay.ended is None:
        assert process.returncode is not None
        raise RunFailed(_died(process.returncode))
