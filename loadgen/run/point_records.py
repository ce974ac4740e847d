"""What every point of a sweep shares (RunContext), and a point's records as they arrive
(PointRecords: kept, appended to requests_conc_<N>.jsonl, fed to the server watch and
the live hooks). The point's life around them is lifecycle.py's; the records may come
from this process (point.py) or from worker processes (scale/pool.py).
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from pathlib import Path

from loadgen.client.preflight import ServerInfo
from loadgen.config.spec import RunSpec
from loadgen.records import RequestRecord
from loadgen.results.files import ResultsWriteError, write_atomic
from loadgen.results.jsonl import JsonlSink
from loadgen.results.store import ResultsDir
from loadgen.run.backend import Backend
from loadgen.run.observers import NoOutputs, RunObserver, RunOutputs
from loadgen.run.scheduler import Clock, Sleep
from loadgen.run.server_watch import ServerWatch


@dataclass(frozen=True, slots=True)
class RunContext:
    """What every point of a sweep shares. Per-point features are not here: they are
    extensions of the point's life (features/), built once for the run."""

    spec: RunSpec
    backend: Backend
    server: ServerInfo
    run_id: str
    results_dir: Path
    hooks: RunObserver
    clock: Clock
    sleep: Sleep
    # fed every request outcome; holds new requests back while the server is suspected
    # gone (None in a worker process: its parent watches the records it gets)
    watch: ServerWatch | None = None
    # how prompts are built (workload.plan.synthesis_of): words, fitted (and why), dataset
    synthesis: tuple[str, str | None] = ("words", None)
    # the vLLM-format result and the like (a worker process writes none)
    outputs: RunOutputs = field(default_factory=NoOutputs)
    # --trials: the trial this context measures (1..N; its spec carries the trial's seed),
    # so its files are conc_<N>_trial_<k>.json and requests_conc_<N>_trial_<k>.jsonl
    trial: int | None = None


class PointRecords:
    """A point's measured records as they finish: kept in order, each appended to its
    JSONL file the moment it ends, seen by the server watch and the live hooks."""

    def __init__(self, run: RunContext, conc: int) -> None:
        self.run = run
        self.records: list[RequestRecord] = []
        path = ResultsDir(run.results_dir).requests_file(conc, run.trial)
        self.sink = JsonlSink(path)  # a fresh file: results_dir.prepare() cleared the way
        # --aiperf-artifacts only: the primers/warmup requests
        self.warmup_records: list[RequestRecord] = []
        # why the point has measured enough (a feature said so): no new request is sent,
        # the ones in flight end as usual
        self.enough: str | None = None

    def stop_sending(self, why: str) -> None:
        self.enough = why

    def sending_stopped(self) -> bool:
        return self.enough is not None

    def add(self, record: RequestRecord) -> None:
        self.records.append(record)
        if self.run.watch is not None:
            self.run.watch.observe(record)
        self.sink.write(record)  # ResultsWriteError stops the run (records so far intact)
        self.run.hooks.request_finished(record)

    def add_warmup(self, record: RequestRecord) -> None:
        if self.run.spec.output.aiperf_artifacts is not None:
            self.warmup_records.append(record)

    def close(self) -> None:
        """The file is complete (raises ResultsWriteError when it could not be written)."""
        self.sink.close()

    def discard(self) -> None:
        """Stopped during warmup: nothing was measured."""
        with contextlib.suppress(ResultsWriteError):  # the run is stopping already
            self.sink.close()

    def rewrite(self) -> None:
        """The records changed after they were written (rare): the file again, whole."""
        write_atomic(self.sink.path, b"".join(r.to_json() + b"\n" for r in self.records))
