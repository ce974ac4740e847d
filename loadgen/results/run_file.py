"""run.json: the run as a whole (docs/run-file.md).

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
import orjson

from loadgen import __version__
from loadgen.config.redact import redact_url
from loadgen.config.spec import RunSpec
from loadgen.results.files import write_atomic
from loadgen.results.outcome import PointOutcome, Stop
from loadgen.results.results_dir import Earlier, settings_of
from loadgen.results.run_record import LaunchedServerFacts
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
        data = self.to_json(
            backend, server, points, stop, interrupted=interrupted, final=final, launched=launched
        )
        write_atomic(
            directory / RUN_FILE,
            orjson.dumps(data, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS, default=str),
        )

    def to_json(
        self,
        backend: Served | None,
        server: ServerFacts | None,
        points: Sequence[PointOutcome],
        stop: Stop | None,
        *,
        interrupted: bool,
        final: bool,
        launched: LaunchedServerFacts | None = None,
    ) -> dict[str, Any]:
        spec, now, reason = self.spec, time.time(), stop
        attempt = {
            "run_id": self.run_id,
            "loadgen_version": __version__,
            "started_unix": self.started_unix,
            "finished_unix": now if final else None,
            "stop_reason": reason.reason if reason else None,
            "stop_detail": reason.detail if reason else None,
            "points": [p.conc for p in points if p.result.identity.run_id == self.run_id],
        }
        earlier = self.earlier.run.attempts_so_far() if self.earlier else ()
        attempts = [msgspec.to_builtins(a) for a in earlier]
        return {
            "run_id": self.run_id,
            "loadgen_version": __version__,
            "target": backend.target if backend else None,
            "base_url": redact_url(backend.base_url if backend else spec.target.base_url or ""),
            "started_unix": attempts[0]["started_unix"] if attempts else self.started_unix,
            "finished_unix": now if final else None,
            "interrupted": interrupted,
            "stop_reason": attempt["stop_reason"],
            "stop_detail": attempt["stop_detail"],
            "settings": settings_of(spec),
            "server": {**server.to_json(), "stream_interval": self.stream_interval}
            if server
            else None,
            "launched_server": msgspec.to_builtins(launched) if launched else None,
            "shard": {"index": spec.processes.shard_index, "count": spec.processes.shard_count},
            "points": [
                {
                    "conc": p.conc,
                    "complete": p.complete,
                    "file": None if p.write_error else p.path.name,
                    "error_rate": p.error_rate,
                    "run_id": p.result.identity.run_id,
                    **p.facts.to_json(),
                }
                for p in points
            ],
            "attempts": [*attempts, attempt],
        }
