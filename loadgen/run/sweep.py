"""Composition root: RunSpec -> preflight -> one point after another -> result files.

Per point (run/point.py): build its requests (off the loop), warm up, measure, write
conc_<N>.json. At the end: run.json, sweep.csv, the console table and the plot.
Cancellation (Ctrl-C, the sidecar's DELETE) keeps every record, writes the interrupted
point marked `complete: false`, and re-raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import orjson
from tokenizers import Tokenizer

from loadgen import __version__
from loadgen.client.preflight import ServerInfo
from loadgen.config.args import default_results_dir
from loadgen.config.redact import redact_url
from loadgen.config.spec import RunSpec
from loadgen.errors import LoadgenError
from loadgen.run.backend import Backend, http_backend
from loadgen.run.ids import new_run_id
from loadgen.run.observers import FanoutObserver, RunObserver
from loadgen.run.point import Point, PointOutcome, RunContext
from loadgen.run.scheduler import Clock, Sleep
from loadgen.run.shard_sync import ShardBarrier
from loadgen.run.shares import Share
from loadgen.sinks.files import write_atomic
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

    @property
    def exit_code(self) -> int:
        if self.interrupted:
            return 130
        return 1 if self.failed_points else 0


def body_options(spec: RunSpec) -> BodyOptions:
    return BodyOptions(
        endpoint=spec.endpoint, model=spec.model or "", temperature=spec.temperature,
        seed=spec.seed, thinking=spec.thinking, reasoning_effort=spec.reasoning_effort,
        extra_body=spec.extra_body,
    )


def probe_prompt(spec: RunSpec, tokenizer: Tokenizer) -> tuple[str, int]:
    """The preflight prompt (text, tokens); raises SpecError when the workload cannot be
    built (isl below the template, range ratio too low, bad dataset)."""
    return Workload(spec, tokenizer, body_options(spec)).preflight_prompt()


def probe_workload(spec: RunSpec, tokenizer: Tokenizer) -> tuple[tuple[str, int], tuple[int, int]]:
    """(the preflight prompt, (input, output) tokens of the longest request) from one
    Workload: the dataset is read and encoded once."""
    workload = Workload(spec, tokenizer, body_options(spec))
    return workload.preflight_prompt(), workload.longest_request()


async def run_sweep(
    spec: RunSpec, *, observer: RunObserver | None = None, tokenizer: Tokenizer | None = None,
    backend: Backend | None = None, clock: Clock = perf_counter_ns,
    sleep: Sleep = asyncio.sleep,
) -> SweepOutcome:
    """Run every concurrency point of `spec`; results land in spec.results_dir.

    Without `backend` the server is `spec.base_url` (or the embedded simulator for
    `spec.sim`) over HTTP; `clock` and `sleep` drive the scheduler (tests pass virtual ones).
    """
    from loadgen.run.workers import resolve_workers

    spec = resolve_workers(spec)
    results_dir = spec.results_dir or default_results_dir()
    results_dir.mkdir(parents=True, exist_ok=True)
    progress = ProgressLine(len(spec.conc)) if spec.progress else None
    hooks = FanoutObserver(observer, progress)
    if tokenizer is None:
        tokenizer = await asyncio.to_thread(  # raw prompts may use any model's tokenizer
            load_tokenizer, spec.tokenizer, check_dsv4=spec.encoder == "dsv4")
    # Bad lengths or a bad dataset fail here, before a simulator starts or a socket opens.
    probe, longest = await asyncio.to_thread(probe_workload, spec, tokenizer)
    sweep = _Sweep(spec, results_dir, tokenizer, hooks, clock, sleep)
    try:
        async with _backend(spec, results_dir, tokenizer, backend) as server:
            await sweep.run(server, probe, longest)
    except asyncio.CancelledError:
        sweep.finish(interrupted=True)
        raise
    except LoadgenError:
        if sweep.points:  # e.g. a worker died: what was measured is written
            sweep.finish(interrupted=True)
        raise
    finally:
        if progress is not None:
            progress.close()
    return sweep.finish(interrupted=False)


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
                 hooks: RunObserver, clock: Clock, sleep: Sleep) -> None:
        self.spec = spec
        self.results_dir = results_dir
        self.tokenizer = tokenizer
        self.hooks = hooks
        self.clock = clock
        self.sleep = sleep
        self.started_unix = time.time()
        self.run_id = new_run_id(self.started_unix)
        self.backend: Backend | None = None
        self.server: ServerInfo | None = None
        self.points: list[PointOutcome] = []
        self.current: Point | None = None
        self._finished: SweepOutcome | None = None

    async def run(self, backend: Backend, probe: tuple[str, int],
                  longest: tuple[int, int]) -> None:
        self.backend = backend
        self.server = await backend.preflight(body_options(self.spec), probe, longest)
        for warning in self.server.warnings:
            print(f"loadgen: WARNING: {warning}", file=sys.stderr)
        context = RunContext(self.spec, backend, self.server, self.run_id, self.results_dir,
                             self.hooks, self.clock, self.sleep, self._barrier())
        if self.spec.workers != 1:
            await self._run_on_workers(context)
            return
        workload = Workload(self.spec, self.tokenizer, self.server.options)
        share = Share(self.spec.shard_index, self.spec.shard_count)
        for conc in self.spec.conc:
            keep = share.owner(conc) if share.shards > 1 else None
            plan = await asyncio.to_thread(workload.point, conc, keep)
            self.current = Point(context, plan, slots=len(share.slots(conc)),
                                 label=share.label)
            self.points.append(await self.current.run_to_end())
            self.current = None

    def _barrier(self) -> Callable[[int], Awaitable[None]] | None:
        spec = self.spec
        if spec.shard_sync is None:
            return None
        barrier = ShardBarrier(spec.shard_sync, spec.shard_index, spec.shard_count)
        barrier.check_fresh()
        return barrier.wait

    async def _run_on_workers(self, context: RunContext) -> None:
        from loadgen.run.workers import worker_pool

        async with worker_pool(context) as pool:
            for conc in self.spec.conc:
                await pool.run_point(conc, self.points.append)

    def finish(self, *, interrupted: bool) -> SweepOutcome:
        if self._finished is not None:
            return self._finished
        if self.current is not None:  # the interrupted point: keep what it measured
            if self.current.started:
                self.points.append(self.current.finalize(complete=False, after=None))
            elif self.current.recorded is not None:  # stopped during warmup: nothing measured
                self.current.recorded.close()
            self.current = None
        failed = tuple(p.conc for p in self.points if p.error_rate > self.spec.max_error_rate)
        self._write_sweep_files(interrupted)
        self._finished = SweepOutcome(self.results_dir, self.run_id, tuple(self.points),
                                      interrupted, failed)
        return self._finished

    def _write_sweep_files(self, interrupted: bool) -> None:
        results = [p.result for p in self.points]
        backend = self.backend
        run = {
            "run_id": self.run_id, "loadgen_version": __version__,
            "target": backend.target if backend else None,
            "base_url": redact_url(backend.base_url if backend else self.spec.base_url or ""),
            "started_unix": self.started_unix,
            "finished_unix": time.time(), "interrupted": interrupted,
            "settings": _settings(self.spec),
            "server": self.server.to_json() if self.server else None,
            "shard": {"index": self.spec.shard_index, "count": self.spec.shard_count},
            "points": [{"conc": p.conc, "complete": p.complete, "file": p.path.name,
                        "error_rate": p.error_rate, **p.facts} for p in self.points],
        }
        write_atomic(self.results_dir / "run.json",
                     orjson.dumps(run, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS,
                                  default=str))  # nested settings (vllm_result) hold Paths
        if not results:
            return
        rows = sweep_rows(results)
        write_csv(self.results_dir / "sweep.csv", rows)
        print(format_table(rows))
        with contextlib.suppress(Exception):  # a plot must never cost the measurements
            plot_sweep(self.results_dir / "sweep.png", results)


def _settings(spec: RunSpec) -> dict[str, Any]:
    settings = dataclasses.asdict(spec)
    settings.pop("api_key", None)  # never write a credential into results
    settings["headers"] = [name for name, _ in spec.headers]  # names only: may hold tokens
    settings["base_url"] = spec.base_url and redact_url(spec.base_url)  # user:pw@ -> ***@
    return {k: str(v) if isinstance(v, Path) else v for k, v in settings.items()}
