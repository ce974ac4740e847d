"""A sweep file's lanes, one after another, into one results tree.

    <tree>/lanes.json     the lanes in the file's order: name, directory, state, exit code
    <tree>/sweep.yaml     the document that ran (credentials redacted)
    <tree>/<lane>/        that lane's result directory, as a plain run writes it

Lanes run in sequence (two at once would measure each other). Every lane's prompts are
built before the first lane starts, so a workload that cannot be built fails at once. A
lane the server or the machine fails (exit 1) is reported and the next lane runs; Ctrl-C
stops the matrix, keeping what was measured. A lane with serve_cmd launches its own server
and stops it before the next lane starts (run/launched_server.py: the port is free again
by then). A lane with find_max runs the capacity
search (orchestrate/capacity.py): its directory holds capacity.json and one find_max_<kind>_<load>/
directory per probe.
"""

from __future__ import annotations

import asyncio
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import orjson
import yaml
from tokenizers import Tokenizer

from loadgen import __version__
from loadgen.config.spec import SpecError
from loadgen.config.sweepfile import Lane, SweepPlan
from loadgen.errors import LoadgenError, UsageError
from loadgen.orchestrate.accuracy import accuracy_done, measure_accuracy, read_data
from loadgen.orchestrate.capacity import find_capacity
from loadgen.results.files import write_atomic
from loadgen.results.store import AL_MATRIX_FILE, LANES_FILE, ResultsDir
from loadgen.run.observers import RunObserver
from loadgen.run.sweep import SweepOutcome
from loadgen.sinks.al_matrix import lane_al, write_al_matrix

INDEX = LANES_FILE
LaneState = Literal["pending", "running", "succeeded", "failed", "interrupted"]


@dataclass(slots=True)
class LaneStatus:
    name: str
    state: LaneState = "pending"
    exit_code: int | None = None
    error: str | None = None
    stop_reason: str | None = None  # a failed lane's code (run/stops.py), as run.json's

    def to_json(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "dir": self.name,
            "state": self.state,
            "exit_code": self.exit_code,
            "error": self.error,
            "stop_reason": self.stop_reason,
        }


@dataclass(frozen=True, slots=True)
class LanesOutcome:
    results_dir: Path
    lanes: tuple[LaneStatus, ...]
    interrupted: bool

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return max((lane.exit_code or 0 for lane in self.lanes), default=0)

    @property
    def measured(self) -> list[Path]:
        """Lane directories holding at least one point, in the file's order."""
        return [
            self.results_dir / lane.name
            for lane in self.lanes
            if any((self.results_dir / lane.name).glob("conc_*.json"))
            or ResultsDir(self.results_dir / lane.name).capacity_file.is_file()
        ]


def _say(message: str) -> None:
    print(f"loadgen: {message}", file=sys.stderr)


async def check_workloads(plan: SweepPlan) -> None:
    """Build every lane's preflight prompt now: a lane that cannot run fails before any does."""
    from loadgen.run.probe import probe_prompt
    from loadgen.tokenizer import load_tokenizer

    tokenizers: dict[tuple[str | None, bool], Tokenizer] = {}
    for index, lane in enumerate(plan.lanes):
        key = (lane.spec.target.tokenizer, lane.spec.workload.encoder == "dsv4")
        if key not in tokenizers:
            tokenizers[key] = await asyncio.to_thread(load_tokenizer, key[0], check_dsv4=key[1])
        try:
            await asyncio.to_thread(probe_prompt, lane.spec, tokenizers[key])
            await asyncio.to_thread(read_data, lane.spec)  # --accuracy's files, if any
        except SpecError as exc:
            raise SpecError(f"lanes[{index}] ({lane.name}): {exc}") from None


class _Index:
    def __init__(self, plan: SweepPlan) -> None:
        self.plan = plan
        self.statuses = [LaneStatus(lane.name) for lane in plan.lanes]
        self.started_unix = time.time()

    def write(self, *, finished: bool = False) -> None:
        index = {
            "loadgen_version": __version__,
            "started_unix": self.started_unix,
            "finished_unix": time.time() if finished else None,
            "lanes": [status.to_json() for status in self.statuses],
            "document": self.plan.document,
        }
        write_atomic(self.plan.results_dir / INDEX, orjson.dumps(index, option=orjson.OPT_INDENT_2))


async def run_lanes(
    plan: SweepPlan,
    *,
    observer_for: Callable[[Lane], RunObserver | None] | None = None,
    tokenizer: Tokenizer | None = None,
) -> LanesOutcome:
    """Run every lane of `plan`; CancelledError (Ctrl-C, DELETE) is re-raised after the
    index says which lanes were interrupted."""
    from loadgen.orchestrate.measure import measure

    plan.results_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(
        plan.results_dir / "sweep.yaml", yaml.safe_dump(plan.document, sort_keys=False).encode()
    )
    index = _Index(plan)
    index.write()
    for number, (lane, status) in enumerate(zip(plan.lanes, index.statuses, strict=True), 1):
        what = (
            f"find-max {lane.spec.load.find_max}"
            if lane.spec.load.find_max
            else f"conc {','.join(map(str, lane.spec.load.conc))}"
        ) + (", launching its server" if lane.spec.target.serve_cmd else "")
        _say(
            f"lane {number}/{len(plan.lanes)} {lane.name}: {what} -> {lane.spec.output.results_dir}"
        )
        status.state = "running"
        index.write()
        try:
            if lane.spec.load.find_max is not None:  # the lane is a capacity search
                await _find_capacity(lane, tokenizer)
                status.state, status.exit_code = "succeeded", 0
                index.write()
                continue
            outcome = await measure(
                lane.spec,
                tokenizer=tokenizer,
                observer=observer_for(lane) if observer_for else None,
            )
            accuracy = read_data(lane.spec)  # --accuracy: its points after the lane's sweep
            checked = (
                await measure_accuracy(lane.spec, accuracy, outcome.results_dir)
                if accuracy is not None and not _accuracy_kept(lane, outcome)
                else None
            )
        except asyncio.CancelledError:
            status.state, status.exit_code = "interrupted", 130
            for later in index.statuses[number:]:
                later.error = "not run: the sweep was interrupted"
            index.write(finished=True)
            raise
        except UsageError:
            raise  # bad input is the whole command's problem, not one lane's
        except LoadgenError as exc:
            status.state, status.exit_code, status.error = "failed", exc.exit_code, str(exc)
            status.stop_reason = exc.stop_reason
            _say(f"lane {lane.name} failed: {exc}")
        else:  # ran to the end; a point over --max-error-rate still makes the exit status 1
            status.state, status.exit_code = "succeeded", outcome.exit_code
            if checked is not None:
                for line in checked.lines():
                    _say(f"lane {lane.name}: {line}")
                status.exit_code = max(outcome.exit_code, checked.exit_code)
                if checked.gate_line() is not None:
                    status.error = checked.gate_line()
            if outcome.failed_points:
                status.error = (
                    f"error rate above --max-error-rate at conc "
                    f"{','.join(map(str, outcome.failed_points))}"
                )
        index.write()
    index.write(finished=True)
    _write_al_matrix(plan)
    return LanesOutcome(plan.results_dir, tuple(index.statuses), interrupted=False)


def _accuracy_kept(lane: Lane, outcome: SweepOutcome) -> bool:
    """A --resume of a lane whose sweep and accuracy points are all complete."""
    return outcome.nothing_to_resume and accuracy_done(lane.spec, outcome.results_dir)


async def _find_capacity(lane: Lane, tokenizer: Tokenizer | None) -> None:
    """A lane with find_max: its search, capacity.json in its directory."""
    outcome = await find_capacity(lane.spec, tokenizer=tokenizer)
    _say(f"lane {lane.name}: capacity search in {outcome.results_dir}/capacity.json")


def _write_al_matrix(plan: SweepPlan) -> None:
    """The tree's AL per model, mode and K (sinks/al_matrix.py), from every lane's complete
    points on disk; it must never cost the measurements, so a failure is only said."""
    try:
        lanes = [
            lane_al(lane.name, lane.spec, ResultsDir(plan.results_dir / lane.name).read_points())
            for lane in plan.lanes
            if (plan.results_dir / lane.name).is_dir()
        ]
        written = write_al_matrix(plan.results_dir, lanes)
    except (LoadgenError, OSError) as exc:
        _say(f"{AL_MATRIX_FILE} not written: {exc}")
        return
    if written is not None:
        _say(f"acceptance lengths per lane: {written}")
