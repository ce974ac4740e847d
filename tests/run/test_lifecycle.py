"""A point's life (run/lifecycle.py) is one sequence, and a feature sees it through its
Extension hooks: in order, the closing ones reversed, `close` also when the point is
stopped, and its part of the result in the point file. Run through the real sweep with
the in-process driver on the virtual-clock fake server of tests/support/exact_server.py, so every
hook's moment is known exactly (how many records there were when it ran)."""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import AsyncIterator, Sequence
from pathlib import Path

import msgspec
import pytest
from tokenizers import Tokenizer

from loadgen.errors import ServerError
from loadgen.records import RequestRecord
from loadgen.results.outcome import PointOutcome
from loadgen.results.point import PointResult, ProfileState
from loadgen.results.store import ResultsDir
from loadgen.run.assemble import PointParts
from loadgen.run.driver import Drive, Driver, Lives, RunPieces
from loadgen.run.extension import Extension, Measured
from loadgen.run.lifecycle import PointLife
from loadgen.run.point import Point
from loadgen.run.point_records import PointRecords, RunContext
from loadgen.run.sweep import SweepOptions, sweep_points
from tests.support.exact_server import ExactServer, VirtualClock, spec


class Recorder(Extension):
    """Notes each hook with the records the point held then; `fail` raises in one."""

    def __init__(self, name: str, log: list[str], fail: str | None = None) -> None:
        self.name = name
        self.log = log
        self.fail = fail
        self.records: PointRecords | None = None

    def _note(self, hook: str) -> None:
        held = len(self.records.records) if self.records is not None else "-"
        self.log.append(f"{self.name}.{hook}:{held}")
        if hook == self.fail:
            raise ServerError(f"{self.name} failed in {hook}")

    async def before_warmup(self) -> None:
        self._note("before_warmup")

    async def after_warmup(self) -> None:
        self._note("after_warmup")

    async def before_measure(self) -> None:
        self._note("before_measure")

    def measure_started(self) -> None:
        self._note("measure_started")

    async def after_measure(self, records: Sequence[RequestRecord]) -> None:
        self._note("after_measure")

    async def close(self) -> None:
        self._note("close")

    def cancel(self) -> None:
        self._note("cancel")

    def parts(self, parts: PointParts, measured: Measured) -> PointParts:
        self._note("parts")
        # a feature's part reaches the file: here, as if it were a profiler window
        return dataclasses.replace(parts, profile=ProfileState(profile_error=self.name))

    def write_files(self, store: ResultsDir, result: PointResult, measured: Measured) -> None:
        self._note("write_files")


class Recorded(Lives):
    """The in-process driver's point, with two recorders beside the run's features."""

    def __init__(self, pieces: RunPieces, log: list[str], fail: str | None) -> None:
        super().__init__()
        self.pieces = pieces
        self.log = log
        self.fail = fail

    async def run_point(self, context: RunContext, conc: int) -> PointOutcome:
        plan = self.pieces.workload.point(conc)
        first, second = Recorder("a", self.log), Recorder("b", self.log, self.fail)

        def send(records: PointRecords) -> Point:
            first.records = second.records = records
            return Point(context, plan, on_record=records.add)

        extensions = self.pieces.features.for_point(context, conc, (first, second))
        return await self.run(PointLife(context, conc, send, extensions))


def drive(log: list[str], fail: str | None = None) -> Drive:
    @contextlib.asynccontextmanager
    async def start(pieces: RunPieces) -> AsyncIterator[Driver]:
        yield Recorded(pieces, log, fail)

    return start


async def test_every_hook_runs_once_in_its_place(tmp_path: Path, tokenizer: Tokenizer) -> None:
    clock, log = VirtualClock(), list[str]()
    run = spec(tmp_path, conc=(2,), prompts_per_conc=3, warmup_per_conc=1)
    options = SweepOptions(
        tokenizer=tokenizer,
        backend=ExactServer(clock),
        clock=clock,
        sleep=clock.sleep,
        drive=drive(log),
    )
    outcome = await sweep_points(run, options)
    assert outcome.exit_code == 0
    hooks = [entry for entry in log if entry.startswith("a.")]
    # warmup requests are not records: 0 until the measured phase, all 6 after it
    assert hooks == [
        "a.before_warmup:0",
        "a.after_warmup:0",
        "a.before_measure:0",
        "a.measure_started:0",
        "a.after_measure:6",
        "a.close:6",
        "a.cancel:6",
        "a.parts:6",
        "a.write_files:6",
    ]
    # the closing hooks run in reverse: b (built after a) closes first
    assert log.index("b.after_measure:6") < log.index("a.after_measure:6")
    assert log.index("b.close:6") < log.index("a.close:6")
    assert log.index("a.before_measure:0") < log.index("b.before_measure:0")
    # the last extension's part is the one in the file
    assert ResultsDir(tmp_path).read_point(2).profile.profile_error == "b"


async def test_a_point_stopped_in_a_hook_still_closes_and_is_written(
    tmp_path: Path, tokenizer: Tokenizer
) -> None:
    clock, log = VirtualClock(), list[str]()
    run = spec(tmp_path, conc=(2,), prompts_per_conc=3, warmup_per_conc=1)
    options = SweepOptions(
        tokenizer=tokenizer,
        backend=ExactServer(clock),
        clock=clock,
        sleep=clock.sleep,
        drive=drive(log, fail="after_measure"),
    )
    with pytest.raises(ServerError, match="b failed in after_measure"):
        await sweep_points(run, options)
    # b raised before a's after_measure: a never saw it, but both closed
    assert "a.after_measure:6" not in log
    assert log.index("b.close:6") < log.index("a.close:6")
    point = ResultsDir(tmp_path).read_point(2)
    assert not point.status.complete and point.status.stop_reason == "server_error"
    assert point.metrics.completed == 6  # every measured record kept
    assert msgspec.structs.asdict(point.profile)["profile_error"] == "b"
