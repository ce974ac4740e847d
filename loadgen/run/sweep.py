"""Composition root: RunSpec -> preflight -> one point after another -> result files.

Per point (its Driver, run/driver.py: this process, or scale/'s worker pool with
--workers): build its requests (off the loop), warm up, measure, write conc_<N>.json;
run.json (results/run_file.py) is written when the first point starts and rewritten after
each point, so even a killed loadgen leaves a run that `--resume` can continue. At the
end: run.json, sweep.csv, the console table and the plot (complete points only: an
incomplete point's figures are in its own file, marked, never in the table people
publish).

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

from tokenizers import Tokenizer

from loadgen.client.gpu_metrics import check_power_csv
from loadgen.client.preflight import ServerInfo, engine_line, engine_nulls, engine_nulls_line
from loadgen.client.server_metrics import metrics_urls
from loadgen.config.build_spec import default_results_dir
from loadgen.config.spec import RunSpec, SpecError
from loadgen.errors import Interrupted, LoadgenError, UsageError
from loadgen.metrics.server_series import PointCapture
from loadgen.results import results_dir as results_files
from loadgen.results.files import ResultsWriteError
from loadgen.results.outcome import PointOutcome
from loadgen.results.results_dir import Earlier, trials_kept
from loadgen.results.run_file import RunFile
from loadgen.results.store import RUN_FILE, ResultsDir
from loadgen.run.backend import Backend, ServerSide, http_backend
from loadgen.run.cache_control import CacheControl
from loadgen.run.driver import Drive, Driver, RunPieces, in_process
from loadgen.run.embedded_sim import sim_stream_interval, sweep_estimate
from loadgen.run.features import run_features
from loadgen.run.ids import new_run_id
from loadgen.run.limits import ensure_fd_limit
from loadgen.run.observers import FanoutObserver, NoOutputs, RunObserver, RunOutputs
from loadgen.run.point_records import RunContext
from loadgen.run.probe import ProbedWorkload, body_options, probe_workload
from loadgen.run.profiler_control import ProfilerControl
from loadgen.run.scheduler import Clock, Sleep
from loadgen.run.server_watch import ServerWatch
from loadgen.run.shard_sync import ShardLink
from loadgen.run.stops import (
    INTERRUPTED_DETAIL,
    SATURATED,
    add_context,
    out_of_descriptors,
    run_level_error,
    stop_of,
)
from loadgen.run.trials import Trials
from loadgen.tokenizer import load_tokenizer
from loadgen.workload.plan import synthesis_of
from loadgen.workload.session_plan import SessionSource, session_source

__all__ = ["PointOutcome", "SweepOptions", "SweepOutcome", "sweep_points"]


@dataclass(frozen=True, slots=True)
class SweepOutcome:
    results_dir: Path
    run_id: str
    points: tuple[PointOutcome, ...]
    interrupted: bool
    failed_points: tuple[int, ...]  # conc of points over --max-error-rate
    nothing_to_resume: bool = False  # --resume of a run whose points were all complete
    # complete points whose AL failed --golden-al's check (results written, exit 1)
    golden_failed: tuple[int, ...] = ()

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if self.failed_points or self.golden_failed else 0


@dataclass(frozen=True, slots=True)
class SweepOptions:
    """How a sweep is run, beside what it measures (the spec): every field has the real
    run's default; tests and other entry points set the ones they replace."""

    # live hooks: the progress line, the exporter, the sidecar
    observer: RunObserver | None = None
    tokenizer: Tokenizer | None = None  # loaded from the spec when None
    # the server: None, `spec.base_url` (or the embedded simulator for `spec.sim`) over HTTP
    backend: Backend | None = None
    clock: Clock = perf_counter_ns  # the scheduler's (tests pass virtual ones)
    sleep: Sleep = asyncio.sleep
    # the files beyond the run's own (loadgen.orchestrate.measure gives the standard
    # ones and the progress line; the engine imports no sink)
    outputs: RunOutputs | None = None
    # runs the points: None, in this process; loadgen.scale.sweep.run_sweep resolves
    # --workers and gives the worker pool's
    drive: Drive | None = None
    # --reset-prefix-cache's resets and --profile-conc's profiler: None, over HTTP
    # (run/cache_control.py, run/profiler_control.py); tests give their own
    cache: CacheControl | None = None
    profiler: ProfilerControl | None = None
    # --coordinator: the other shards, met over the network (loadgen.scale.coordinator);
    # it starts each point with them and stops the run when one of them stops
    shards: ShardLink | None = None
    run_id: str | None = None  # given: the coordinated shards share shard 0's; else a new one


async def sweep_points(spec: RunSpec, options: SweepOptions | None = None) -> SweepOutcome:
    """Run every concurrency point of `spec`; results land in spec.results_dir: run.json,
    the point and record files, and whatever `options.outputs` writes."""
    options = options or SweepOptions()
    drive = options.drive
    if drive is None and spec.processes.workers != 1:
        raise UsageError(
            f"--workers {spec.processes.workers or 'auto'}: this entry point runs one process; "
            "start the run with loadgen.scale.sweep.run_sweep, which starts the workers"
        )
    results_dir = spec.output.results_dir or default_results_dir()
    earlier = results_files.prepare(results_dir, spec)
    if earlier is not None and not earlier.remaining:
        return SweepOutcome(
            results_dir,
            earlier.run.run_id,
            earlier.points,
            False,
            (),
            nothing_to_resume=True,
        )
    if earlier is not None:
        print(f"loadgen: {earlier.summary(results_dir)}", file=sys.stderr)
    estimate = sweep_estimate(spec, earlier.remaining if earlier else spec.load.conc)
    if estimate is not None:
        print(f"loadgen: {estimate}", file=sys.stderr)
    ensure_fd_limit(max(spec.load.conc))  # before the embedded simulator, which inherits it
    hooks = FanoutObserver(options.observer)
    tokenizer = options.tokenizer
    if tokenizer is None:
        tokenizer = await asyncio.to_thread(  # raw prompts may use any model's tokenizer
            load_tokenizer, spec.target.tokenizer, check_dsv4=spec.workload.encoder == "dsv4"
        )
    # Bad lengths or a bad dataset fail here, before a simulator starts or a socket opens.
    probed = await asyncio.to_thread(probe_workload, spec, tokenizer)
    sessions = await asyncio.to_thread(session_source, spec, tokenizer) if spec.sessions else None
    sweep = _Sweep(spec, results_dir, tokenizer, hooks, earlier, sessions, options)
    try:
        attempt = earlier.attempt if earlier else 1
        async with _backend(spec, results_dir, tokenizer, options.backend, attempt) as server:
            await sweep.run(*server, probed)
    except asyncio.CancelledError:
        sweep.finish(Interrupted(INTERRUPTED_DETAIL))
        raise
    except LoadgenError as stop:
        raise sweep.stopped(stop) from None
    except BaseExceptionGroup as group:  # from a request's task: a disk, a limit, a server
        raise sweep.stopped(run_level_error(group)) from None
    except OSError as exc:  # outside any task group: a point's summary importing lazily
        exhausted = out_of_descriptors(exc)
        if exhausted is None:
            raise
        raise sweep.stopped(exhausted) from None
    return sweep.finish(None)


def _say_saturated(outcome: PointOutcome, todo: tuple[int, ...]) -> None:
    """The over-saturation stop is never silent: which point, why, and what did not run."""
    later = todo[todo.index(outcome.conc) + 1 :] if outcome.conc in todo else ()
    skipped = (
        f"; higher points not run (more load): conc {', '.join(map(str, later))}" if later else ""
    )
    print(
        f"loadgen: conc {outcome.conc} stopped early, {outcome.result.status.stop_detail}; "
        f"{outcome.path.name} is kept marked complete: false (stop_reason saturated)"
        f"{skipped}; --no-saturation-stop runs it to the end",
        file=sys.stderr,
    )


@contextlib.asynccontextmanager
async def _backend(
    spec: RunSpec, results_dir: Path, tokenizer: Tokenizer, given: Backend | None, attempt: int
) -> AsyncIterator[tuple[Backend, ServerSide]]:
    if given is not None:
        yield given, ServerSide()
        return
    async with http_backend(spec, results_dir, tokenizer, attempt) as backend:
        yield backend, backend.side


class _Sweep:
    def __init__(
        self,
        spec: RunSpec,
        results_dir: Path,
        tokenizer: Tokenizer,
        hooks: RunObserver,
        earlier: Earlier | None,
        sessions: SessionSource | None,
        options: SweepOptions,
    ) -> None:
        self.spec = spec
        self.options = options
        self.outputs: RunOutputs = options.outputs or NoOutputs()
        self.sessions = sessions
        self.results_dir = results_dir
        self.tokenizer = tokenizer
        self.hooks = hooks
        self.earlier = earlier
        self.started_unix = time.time()
        self.run_id = options.run_id or new_run_id(self.started_unix)
        self.backend: Backend | None = None
        self.side = ServerSide()
        self.server: ServerInfo | None = None
        self.points: list[PointOutcome] = list(earlier.points) if earlier else []
        self.todo = earlier.remaining if earlier else spec.load.conc
        self.at: int | None = None  # the point in progress
        self.drive: Drive = options.drive or in_process
        self.driver: Driver | None = None  # the points' runner, once the server answered
        self.began = False  # a point was started: from then on run.json exists
        self.said_nulls: tuple[str, ...] = ()  # the engine's null fields, as last printed
        self.unwritten: list[str] = []
        self._finished: SweepOutcome | None = None

    def _kept_outputs(self, backend: Backend) -> None:
        """--resume: the kept points' outputs a failed write left out (--aiperf-artifacts),
        from what is on disk: their records and result; their warmup requests and server
        series were not kept, so those files have none."""
        if self.earlier is None or self.spec.output.aiperf_artifacts is None:
            return
        store = ResultsDir(self.results_dir)
        urls = metrics_urls(self.spec.telemetry.server_metrics, backend.base_url)
        for point in self.earlier.points:
            records = store.read_records(point.conc)
            offset = records[0].clock_unix_ns - records[0].clock_mono_ns if records else 0
            self.outputs.point_kept(
                store, point.result, records, PointCapture((), (), offset, urls)
            )

    async def run(self, backend: Backend, side: ServerSide, probed: ProbedWorkload) -> None:
        self.backend, self.side = backend, side
        if self.spec.telemetry.gpu_power_csv is not None:
            check_power_csv(self.spec.telemetry.gpu_power_csv)
        self.server = await backend.preflight(body_options(self.spec), probed.probe, probed.longest)
        workload = probed.workload.with_options(self.server.options)
        print(engine_line(self.server), file=sys.stderr)
        for warning in self.server.warnings:
            print(f"loadgen: WARNING: {warning}", file=sys.stderr)
        self._check_same_model()
        features = await run_features(
            self.spec,
            backend,
            side,
            cache=self.options.cache,
            profiler=self.options.profiler,
            link=self.options.shards,
        )
        launched = side.launched
        # a launched server is watched by its pid, as --server-pid's (its death is seen at once)
        watch = (
            ServerWatch(backend.probe, launched.pid, "launched by --serve-cmd")
            if launched
            else ServerWatch(backend.probe, self.spec.processes.server_pid)
        )
        context = RunContext(
            self.spec,
            backend,
            self.server,
            self.run_id,
            self.results_dir,
            self.hooks,
            self.options.clock,
            self.options.sleep,
            watch,
            synthesis_of(self.spec, self.tokenizer),
            self.outputs,
        )
        if self.earlier is not None:
            results_files.set_aside(self.results_dir, self.earlier, self.spec.load.trials)
            self._kept_outputs(backend)
        self.began = True
        self._write_run_file(None, final=False)
        pieces = RunPieces(context, workload, self.sessions, self.tokenizer, features)
        async with asyncio.TaskGroup() as group:
            watchers: list[asyncio.Task[None]] = [
                group.create_task(watch.run(), name="loadgen-server-watch")
            ]
            if self.options.shards is not None:  # another shard's stop stops this one
                watchers.append(group.create_task(self.options.shards.watch()))
            async with self.drive(pieces) as driver:
                self.driver = Trials(driver, self.spec.load.trials, backend.fresh_connections)
                await self._points(context, self.driver)
            for watcher in watchers:
                watcher.cancel()

    async def _points(self, context: RunContext, driver: Driver) -> None:
        """Each point still to run, in order, until one saturates."""
        for conc in self.todo:
            self.at = conc
            outcome = await driver.run_point(context, conc)
            self._record(outcome)
            self._say_engine_nulls(outcome)
            self._point_done(outcome)
            if outcome.result.status.stop_reason == SATURATED:
                _say_saturated(outcome, self.todo)
                return

    def _record(self, outcome: PointOutcome) -> None:
        self.points.append(outcome)
        if outcome.write_error is not None:
            self.unwritten.append(outcome.write_error.path.name)

    def _say_engine_nulls(self, outcome: PointOutcome) -> None:
        """Which fields the engine leaves null, as this point has them: said at the first
        point and again only when they change."""
        assert self.server is not None
        nulls = engine_nulls(self.server, outcome.result.to_json())
        if nulls and nulls != self.said_nulls:
            print(engine_nulls_line(self.server, outcome.conc, nulls), file=sys.stderr)
        self.said_nulls = nulls

    def _point_done(self, outcome: PointOutcome) -> None:
        self.at = None
        if outcome.write_error is not None:
            raise outcome.write_error
        self._write_run_file(None, final=False)  # for --resume after a hard kill

    def _check_same_model(self) -> None:
        assert self.server is not None
        if self.earlier is not None:
            results_files.check_same_model(self.results_dir, self.earlier.run, self.server.model)

    def stopped(self, stop: LoadgenError) -> LoadgenError:
        """Finish the sweep for `stop`; the error with where it stopped and what is kept."""
        where = self.at
        self.finish(stop)
        if not self.began:
            return stop  # stopped before any point: nothing was written
        parts = []
        point_file = ResultsDir(self.results_dir).point_file(where).name if where else ""
        if where is not None:
            mine = [
                p
                for p in self.points
                if p.conc == where and p.result.identity.run_id == self.run_id
            ]
            kept = bool(mine)
            point_file = mine[-1].path.name if mine else point_file  # a trial's own file
            parts.append(
                f"conc {where} stopped during its warmup (nothing measured)"
                if not kept
                else f"conc {where} stopped"
                if point_file in self.unwritten
                else f"{point_file} is kept marked complete: false"
            )
            done = (
                trials_kept(ResultsDir(self.results_dir), where, self.spec.load.trials)
                if self.spec.load.trials > 1
                else 0
            )
            if done:  # --trials: the trials before the stopped one are whole
                parts.append(
                    f"its first {done} of {self.spec.load.trials} trials are complete and kept"
                )
        if self.unwritten:
            parts.append(f"not written: {', '.join(self.unwritten)}")
        parts.append(f"results in {self.results_dir}")
        if not isinstance(stop, SpecError):  # run.json exists since the first point began
            parts.append(f"once fixed, continue with --resume {self.results_dir} (same flags)")
        return add_context(stop, "; ".join(parts))

    def finish(self, stop: LoadgenError | None) -> SweepOutcome:
        if self._finished is not None:
            return self._finished
        stopped = self.driver.abandoned(stop) if self.driver is not None else None
        if stopped is not None:  # the stopped point: keep what it measured
            self._record(stopped)
        # a saturated point's cancelled requests are the stop's doing, not the server's
        failed = tuple(
            p.conc
            for p in self.points
            if p.error_rate > self.spec.deadlines.max_error_rate
            and p.result.status.stop_reason != SATURATED
        )
        if self.began:
            self._write_run_file(stop, final=True)
            self._write_sweep_files()
        golden = tuple(
            p.conc
            for p in self.points
            if p.complete and p.result.metrics.golden_acceptance_ok is False
        )
        self._finished = SweepOutcome(
            self.results_dir,
            self.run_id,
            tuple(self.points),
            isinstance(stop, Interrupted),
            failed,
            golden_failed=golden,
        )
        return self._finished

    def _write_run_file(self, stop: LoadgenError | None, *, final: bool) -> None:
        spec = self.spec
        interval = sim_stream_interval(spec.sim_args) if spec.sim else None
        run = RunFile(spec, self.run_id, self.started_unix, self.earlier, interval)
        try:
            run.write(
                self.results_dir,
                self.backend,
                self.server,
                self.points,
                stop_of(stop),
                interrupted=isinstance(stop, Interrupted),
                final=final,
                launched=self.side.launched.facts() if self.side.launched else None,
            )
        except ResultsWriteError:
            if not final:
                raise
            self.unwritten.append(RUN_FILE)

    def _write_sweep_files(self) -> None:
        results = [p.result for p in self.points if p.complete]
        self.unwritten += self.outputs.sweep_written(ResultsDir(self.results_dir), results)
