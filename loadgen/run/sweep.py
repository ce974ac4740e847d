"""Composition root: RunSpec -> preflight -> one point after another -> result files.

Per point (run/point.py): build its requests (off the loop), warm up, measure, write
conc_<N>.json; run.json is rewritten after each point, so even a killed loadgen leaves
a run that `--resume` can continue. At the end: run.json, sweep.csv, the console table
and the plot (complete points only: an incomplete point's figures are in its own file,
marked, never in the table people publish).

A run that stops early, by Ctrl-C (cancellation) or by a run-level error (the server
gone, a full disk, no file descriptors left), keeps every record, writes the point in
progress marked `complete: false` with its `stop_reason`, runs no later point, and
re-raises: the CLI turns the error into one line and its exit status.
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import orjson
from tokenizers import Tokenizer

from loadgen import __version__
from loadgen.client.preflight import ServerInfo
from loadgen.config.args import default_results_dir
from loadgen.config.spec import RunSpec, SpecError
from loadgen.errors import Interrupted, LoadgenError
from loadgen.run import results_dir as results_files
from loadgen.run.backend import Backend, http_backend
from loadgen.run.ids import new_run_id
from loadgen.run.limits import ensure_fd_limit
from loadgen.run.observers import FanoutObserver, RunObserver
from loadgen.run.point import Point, PointOutcome, RunContext, Stop
from loadgen.run.results_dir import Earlier
from loadgen.run.scheduler import Clock, Sleep
from loadgen.run.server_watch import ServerWatch
from loadgen.run.stops import INTERRUPTED_DETAIL, add_context, run_level_error, stop_reason
from loadgen.sinks.files import ResultsWriteError, write_atomic
from loadgen.sinks.plot import plot_sweep
from loadgen.sinks.progress import ProgressLine
from loadgen.sinks.table import format_table, sweep_rows, write_csv
from loadgen.tokenizer import load_tokenizer
from loadgen.workload.bodies import BodyOptions
from loadgen.workload.plan import Workload

__all__ = ["PointOutcome", "SweepOutcome", "run_sweep"]


@dataclass(frozen=True, slots=True)
class SweepOutcome:
    results_dir: Path
    run_id: str
    points: tuple[PointOutcome, ...]
    interrupted: bool
    failed_points: tuple[int, ...]  # conc of points over --max-error-rate
    nothing_to_resume: bool = False  # --resume of a run whose points were all complete

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if self.failed_points else 0


def body_options(spec: RunSpec) -> BodyOptions:
    return BodyOptions(
        endpoint=spec.endpoint, model=spec.model or "", temperature=spec.temperature,
        seed=spec.seed, thinking=spec.thinking, reasoning_effort=spec.reasoning_effort,
    )


def probe_prompt(spec: RunSpec, tokenizer: Tokenizer) -> tuple[str, int]:
    """The preflight prompt (text, tokens); raises SpecError when the workload cannot be
    built (isl below the template, range ratio too low, bad dataset)."""
    return Workload(spec, tokenizer, body_options(spec)).preflight_prompt()


async def run_sweep(
    spec: RunSpec, *, observer: RunObserver | None = None, tokenizer: Tokenizer | None = None,
    backend: Backend | None = None, clock: Clock = perf_counter_ns,
    sleep: Sleep = asyncio.sleep,
) -> SweepOutcome:
    """Run every concurrency point of `spec`; results land in spec.results_dir.

    Without `backend` the server is `spec.base_url` (or the embedded simulator for
    `spec.sim`) over HTTP; `clock` and `sleep` drive the scheduler (tests pass virtual ones).
    """
    results_dir = spec.results_dir or default_results_dir()
    earlier = results_files.prepare(results_dir, spec)
    if earlier is not None and not earlier.remaining:
        return SweepOutcome(results_dir, str(earlier.run.get("run_id")), earlier.points,
                            False, (), nothing_to_resume=True)
    ensure_fd_limit(max(spec.conc))  # before the embedded simulator, which inherits it
    progress = ProgressLine(len(spec.conc)) if spec.progress else None
    hooks = FanoutObserver(observer, progress)
    if tokenizer is None:
        tokenizer = await asyncio.to_thread(  # raw prompts may use any model's tokenizer
            load_tokenizer, spec.tokenizer, check_dsv4=spec.encoder == "dsv4")
    # Bad lengths or a bad dataset fail here, before a simulator starts or a socket opens.
    probe = await asyncio.to_thread(probe_prompt, spec, tokenizer)
    sweep = _Sweep(spec, results_dir, tokenizer, hooks, clock, sleep, earlier)
    try:
        async with _backend(spec, results_dir, tokenizer, backend) as server:
            await sweep.run(server, probe)
    except asyncio.CancelledError:
        sweep.finish(Interrupted(INTERRUPTED_DETAIL))
        raise
    except LoadgenError as stop:
        raise sweep.stopped(stop) from None
    except BaseExceptionGroup as group:  # from a request's task: a disk, a limit, a server
        raise sweep.stopped(run_level_error(group)) from None
    finally:
        if progress is not None:
            progress.close()
    return sweep.finish(None)


@contextlib.asynccontextmanager
async def _backend(spec: RunSpec, results_dir: Path, tokenizer: Tokenizer,
                   given: Backend | None) -> AsyncIterator[Backend]:
    if given is not None:
        yield given
        return
    async with http_backend(spec, results_dir, tokenizer) as backend:
        yield backend


class _Sweep:
    def __init__(self, spec: RunSpec, results_dir: Path, tokenizer: Tokenizer,
                 hooks: RunObserver, clock: Clock, sleep: Sleep, earlier: Earlier | None) -> None:
        self.spec = spec
        self.results_dir = results_dir
        self.tokenizer = tokenizer
        self.hooks = hooks
        self.clock = clock
        self.sleep = sleep
        self.earlier = earlier
        self.started_unix = time.time()
        self.run_id = new_run_id(self.started_unix)
        self.backend: Backend | None = None
        self.server: ServerInfo | None = None
        self.points: list[PointOutcome] = list(earlier.points) if earlier else []
        self.todo = earlier.remaining if earlier else spec.conc
        self.current: Point | None = None
        self.began = False  # a point was started: from then on run.json exists
        self.unwritten: list[str] = []
        self._finished: SweepOutcome | None = None

    async def run(self, backend: Backend, probe: tuple[str, int]) -> None:
        self.backend = backend
        self.server = await backend.preflight(body_options(self.spec), probe)
        for warning in self.server.warnings:
            print(f"loadgen: WARNING: {warning}", file=sys.stderr)
        self._check_same_model()
        watch = ServerWatch(backend.probe, self.spec.server_pid)
        context = RunContext(self.spec, backend, self.server, self.run_id, self.results_dir,
                             self.hooks, self.clock, self.sleep, watch)
        workload = Workload(self.spec, self.tokenizer, self.server.options)
        if self.earlier is not None:
            results_files.set_aside(self.results_dir, self.earlier)
        self.began = True
        self._write_run_file(None, final=False)
        async with asyncio.TaskGroup() as group:
            watcher = group.create_task(watch.run(), name="loadgen-server-watch")
            for conc in self.todo:
                plan = await asyncio.to_thread(workload.point, conc)
                self.current = Point(context, plan)
                outcome = await self.current.run_to_end()
                self.points.append(outcome)
                self.current = None
                if outcome.write_error is not None:
                    self.unwritten.append(outcome.write_error.path.name)
                    raise outcome.write_error
                self._write_run_file(None, final=False)  # for --resume after a hard kill
            watcher.cancel()

    def _check_same_model(self) -> None:
        assert self.server is not None
        before = (self.earlier.run.get("server") or {}).get("model") if self.earlier else None
        if before is not None and before != self.server.model:
            raise SpecError(f"--resume {self.results_dir}: the server now serves "
                            f"{self.server.model!r}; the run being resumed measured {before!r}")

    def stopped(self, stop: LoadgenError) -> LoadgenError:
        """Finish the sweep for `stop`; the error with where it stopped and what is kept."""
        where = self.current.plan.conc if self.current is not None else None
        kept = self.current is not None and self.current.started
        self.finish(stop)
        if not self.began:
            return stop  # stopped before any point: nothing was written
        parts = []
        point_file = f"conc_{where}.json"
        if where is not None:
            parts.append(f"conc {where} stopped during its warmup (nothing measured)"
                         if not kept else f"conc {where} stopped" if point_file in
                         self.unwritten else f"{point_file} is kept marked complete: false")
        if self.unwritten:
            parts.append(f"not written: {', '.join(self.unwritten)}")
        parts.append(f"results in {self.results_dir}")
        if self._resumable(stop):
            parts.append(f"once fixed, continue with --resume {self.results_dir} (same flags)")
        return add_context(stop, "; ".join(parts))

    @staticmethod
    def _resumable(stop: LoadgenError) -> bool:
        # run.json was written when the first point began (and after each point since)
        return not isinstance(stop, SpecError)

    def finish(self, stop: LoadgenError | None) -> SweepOutcome:
        if self._finished is not None:
            return self._finished
        interrupted = isinstance(stop, Interrupted)
        if self.current is not None:  # the stopped point: keep what it measured
            point = self.current
            self.current = None
            if point.started:
                outcome = point.finalize(complete=False, after=None, stop=_stop_of(stop))
                self.points.append(outcome)
                if outcome.write_error is not None:
                    self.unwritten.append(outcome.write_error.path.name)
            else:  # stopped during warmup: nothing was measured
                with contextlib.suppress(ResultsWriteError):
                    point.sink.close()
        failed = tuple(p.conc for p in self.points if p.error_rate > self.spec.max_error_rate)
        if self.began:
            self._write_run_file(stop, final=True)
            self._write_sweep_files()
        self._finished = SweepOutcome(self.results_dir, self.run_id, tuple(self.points),
                                      interrupted, failed)
        return self._finished

    def _write_run_file(self, stop: LoadgenError | None, *, final: bool) -> None:
        data = orjson.dumps(self._run_json(stop, final),
                            option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS)
        try:
            write_atomic(self.results_dir / results_files.RUN_FILE, data)
        except ResultsWriteError:
            if not final:
                raise
            self.unwritten.append(results_files.RUN_FILE)

    def _run_json(self, stop: LoadgenError | None, final: bool) -> dict[str, Any]:
        backend, now = self.backend, time.time()
        reason = _stop_of(stop)
        new_points = [p.conc for p in self.points if p.result["run_id"] == self.run_id]
        attempt = {"run_id": self.run_id, "loadgen_version": __version__,
                   "started_unix": self.started_unix, "finished_unix": now if final else None,
                   "stop_reason": reason.reason if reason else None,
                   "stop_detail": reason.detail if reason else None, "points": new_points}
        attempts = list(self.earlier.run.get("attempts") or [_as_attempt(self.earlier.run)]
                        ) if self.earlier else []
        return {
            "run_id": self.run_id, "loadgen_version": __version__,
            "target": backend.target if backend else None,
            "base_url": backend.base_url if backend else self.spec.base_url,
            "started_unix": attempts[0]["started_unix"] if attempts else self.started_unix,
            "finished_unix": now if final else None,
            "interrupted": isinstance(stop, Interrupted),
            "stop_reason": attempt["stop_reason"], "stop_detail": attempt["stop_detail"],
            "settings": results_files.settings_of(self.spec),
            "server": self.server.to_json() if self.server else None,
            "points": [{"conc": p.conc, "complete": p.complete,
                        "file": None if p.write_error else p.path.name,
                        "error_rate": p.error_rate, "run_id": p.result["run_id"]}
                       for p in self.points],
            "attempts": [*attempts, attempt],
        }

    def _write_sweep_files(self) -> None:
        results = [p.result for p in self.points if p.complete]
        if not results:
            return
        rows = sweep_rows(results)
        try:
            write_csv(self.results_dir / "sweep.csv", rows)
        except ResultsWriteError:
            self.unwritten.append("sweep.csv")
        print(format_table(rows))
        with contextlib.suppress(Exception):  # a plot must never cost the measurements
            plot_sweep(self.results_dir / "sweep.png", results)


def _stop_of(stop: LoadgenError | None) -> Stop | None:
    if stop is None:
        return None
    return Stop(stop_reason(stop), str(stop))


def _as_attempt(run: dict[str, Any]) -> dict[str, Any]:
    """An attempt entry for a run.json written before attempts were recorded."""
    return {"run_id": run.get("run_id"), "loadgen_version": run.get("loadgen_version"),
            "started_unix": run.get("started_unix"), "finished_unix": run.get("finished_unix"),
            "stop_reason": "interrupted" if run.get("interrupted") else None,
            "stop_detail": None, "points": [p.get("conc") for p in run.get("points", [])]}
