"""run.json: the run as a whole (docs/run-file.md), written as the RunRecord it is read
back as (results/run_record.py).

Written when the first point starts, after each point and at the end, so a killed
loadgen leaves one that `--resume` can continue; `loadgen merge` reads each shard's.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import msgspec

from loadgen import __version__
from loadgen.config.redact import redact_url
from loadgen.config.spec import RunSpec
from loadgen.results.files import write_atomic
from loadgen.results.outcome import PointOutcome, Stop
from loadgen.results.results_dir import Earlier
from loadgen.results.run_record import (
    Attempt,
    LaunchedServerFacts,
    PointEntry,
    RunRecord,
    RunSettings,
    ShardInfo,
    encode_run,
)
from loadgen.results.run_record import ServerFacts as RecordedServer
from loadgen.results.store import RUN_FILE


class ServerFacts(Protocol):
    """What the preflight found of the server (client/preflight.py's ServerInfo), as
    run.json stores it."""

    def to_json(self) -> dict[str, Any]: ...


class Served(Protocol):
    """The server the run measured, as run.json names it (the engine's Backend is one)."""

    @property
    def target(self) -> str: ...

    @property
    def base_url(self) -> str: ...


@dataclass(frozen=True, slots=True)
class RunFile:
    spec: RunSpec
    run_id: str  # this attempt's
    started_unix: float  # this attempt's
    earlier: Earlier | None  # the run this attempt resumes
    # engine steps per stream chunk, when known (the embedded simulator's): `loadgen merge`
    # summarizes with it as the run did
    stream_interval: int | None = None

    def write(
        self,
        directory: Path,
        backend: Served | None,
        server: ServerFacts | None,
        points: Sequence[PointOutcome],
        stop: Stop | None,
        *,
        interrupted: bool,
        final: bool,
        launched: LaunchedServerFacts | None = None,
    ) -> None:
        """Raises ResultsWriteError when it cannot be written. `stop`: why the run
        stopped (None: it did not), `interrupted`: by Ctrl-C or a signal; `launched`: the
        server loadgen launched for the run (--serve-cmd), as far as it is known."""
        record = self.record(
            backend, server, points, stop, interrupted=interrupted, final=final, launched=launched
        )
        write_atomic(directory / RUN_FILE, encode_run(record))

    def record(
        self,
        backend: Served | None,
        server: ServerFacts | None,
        points: Sequence[PointOutcome],
        stop: Stop | None,
        *,
        interrupted: bool,
        final: bool,
        launched: LaunchedServerFacts | None = None,
    ) -> RunRecord:
        """run.json as of now: this attempt added to the earlier run's."""
        spec, now = self.spec, time.time()
        attempt = Attempt(
            run_id=self.run_id,
            loadgen_version=__version__,
            started_unix=self.started_unix,
            finished_unix=now if final else None,
            stop_reason=stop.reason if stop else None,
            stop_detail=stop.detail if stop else None,
            points=tuple(p.conc for p in points if p.result.identity.run_id == self.run_id),
        )
        earlier = self.earlier.run.attempts_so_far() if self.earlier else ()
        return RunRecord(
            run_id=self.run_id,
            loadgen_version=__version__,
            target=backend.target if backend else None,
            base_url=redact_url(backend.base_url if backend else spec.target.base_url or ""),
            started_unix=earlier[0].started_unix if earlier else self.started_unix,
            finished_unix=attempt.finished_unix,
            interrupted=interrupted,
            stop_reason=attempt.stop_reason,
            stop_detail=attempt.stop_detail,
            settings=RunSettings.of(spec),
            server=self._server(server) if server else None,
            launched_server=launched,
            shard=ShardInfo(spec.processes.shard_index, spec.processes.shard_count),
            points=tuple(_entry(p) for p in points),
            attempts=(*earlier, attempt),
        )

    def _server(self, server: ServerFacts) -> RecordedServer:
        facts = {**server.to_json(), "stream_interval": self.stream_interval}
        return msgspec.convert(
            msgspec.to_builtins(facts, enc_hook=str, str_keys=True), RecordedServer
        )


def _entry(point: PointOutcome) -> PointEntry:
    """The point as run.json lists it, with the facts kept beside it (PointFacts' fields
    are PointEntry's)."""
    return PointEntry(
        conc=point.conc,
        complete=point.complete,
        file=None if point.write_error else point.path.name,
        error_rate=point.error_rate,
        run_id=point.result.identity.run_id,
        **msgspec.structs.asdict(point.facts),
    )
