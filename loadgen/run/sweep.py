"""Composition root: RunSpec -> preflight -> one point after another -> result files.

Per point: build its requests (off the loop), warm up (opens and keeps the connections),
scrape the server's /metrics, run the measured requests (each record to JSONL as it
finishes), scrape again, summarize, write conc_<N>.json. At the end: run.json, sweep.csv,
the console table and the plot. Cancellation (Ctrl-C, the sidecar's DELETE) keeps every
record, writes the interrupted point marked `complete: false`, and re-raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import sys
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from time import perf_counter_ns
from typing import Any

import aiohttp
import orjson
from tokenizers import Tokenizer

from loadgen import __version__
from loadgen.client.preflight import ServerInfo, preflight, scrape_metrics
from loadgen.client.transport import Transport, open_session
from loadgen.config.args import default_results_dir
from loadgen.config.spec import RunSpec
from loadgen.metrics.server import ServerSnapshot
from loadgen.metrics.summary import PointContext, summarize
from loadgen.records import RequestRecord
from loadgen.run.ids import new_run_id, x_request_id
from loadgen.run.loop_health import LoopLag, no_gc_pauses
from loadgen.run.observers import FanoutObserver, RunObserver
from loadgen.run.scheduler import arrival_offsets_ns, closed_loop, deadline_after, open_loop
from loadgen.sinks.jsonl import JsonlSink
from loadgen.workload.bodies import BodyOptions
from loadgen.workload.plan import PointPlan, RequestSpec, Workload, point_rng, text_counter

ARRIVALS = 3  # rng stream id for open-loop arrival times


@dataclass(frozen=True, slots=True)
class PointOutcome:
    conc: int
    result: dict[str, Any]
    complete: bool
    path: Path

    @property
    def error_rate(self) -> float:
        return float(self.result.get("error_rate") or 0.0)


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


@contextlib.asynccontextmanager
async def _target(spec: RunSpec, results_dir: Path) -> AsyncIterator[tuple[RunSpec, str]]:
    if not spec.sim:
        yield spec, "server"
        return
    from loadgen.run.embedded_sim import embedded_simulator

    async with embedded_simulator(spec.sim_args, log_path=results_dir / "simulator.log") as url:
        yield dataclasses.replace(spec, base_url=url), "simulator"


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
    spec: RunSpec, *, observer: RunObserver | None = None, tokenizer: Tokenizer | None = None
) -> SweepOutcome:
    """Run every concurrency point of `spec`; results land in spec.results_dir."""
    from loadgen.sinks.progress import ProgressLine
    from loadgen.tokenizer import load_tokenizer

    results_dir = spec.results_dir or default_results_dir()
    results_dir.mkdir(parents=True, exist_ok=True)
    progress = ProgressLine(len(spec.conc)) if spec.progress else None
    hooks = FanoutObserver(observer, progress)
    if tokenizer is None:
        tokenizer = await asyncio.to_thread(  # raw prompts may use any model's tokenizer
            load_tokenizer, spec.tokenizer, check_dsv4=spec.encoder == "dsv4")
    options = body_options(spec)
    # Bad lengths or a bad dataset fail here, before a simulator starts or a socket opens.
    probe = await asyncio.to_thread(probe_prompt, spec, tokenizer)
    async with _target(spec, results_dir) as (spec, target):
        assert spec.base_url is not None
        sweep = _Sweep(spec, target, results_dir, tokenizer, hooks, options, probe)
        headers = dict(spec.headers)
        if spec.api_key:
            headers["Authorization"] = f"Bearer {spec.api_key}"
        async with open_session(max_connections=max(spec.conc), headers=headers) as session:
            try:
                await sweep.run(session)
            except asyncio.CancelledError:
                sweep.finish(interrupted=True)
                raise
            finally:
                if progress is not None:
                    progress.close()
        return sweep.finish(interrupted=False)


class _Sweep:
    def __init__(self, spec: RunSpec, target: str, results_dir: Path, tokenizer: Tokenizer,
                 hooks: FanoutObserver, options: BodyOptions, probe: tuple[str, int]) -> None:
        assert spec.base_url is not None
        self.options = options
        self.probe = probe
        self.spec = spec
        self.base_url = spec.base_url.rstrip("/")
        self.target = target
        self.results_dir = results_dir
        self.tokenizer = tokenizer
        self.hooks = hooks
        self.started_unix = time.time()
        self.run_id = new_run_id(self.started_unix)
        self.server: ServerInfo | None = None
        self.points: list[PointOutcome] = []
        self.current: _Point | None = None
        self._finished: SweepOutcome | None = None

    async def run(self, session: aiohttp.ClientSession) -> None:
        spec = self.spec
        self.server = await preflight(
            session, self.base_url, wanted_model=spec.model, isl=spec.isl, osl=spec.osl,
            options=self.options, prompt=self.probe, request_timeout_s=spec.request_timeout_s,
        )
        for warning in self.server.warnings:
            print(f"loadgen: WARNING: {warning}", file=sys.stderr)
        workload = Workload(spec, self.tokenizer, self.server.options)
        transport = Transport(session, self.base_url + self.server.options.path,
                              request_timeout_s=spec.request_timeout_s,
                              count_text=text_counter(self.tokenizer))
        for conc in spec.conc:
            plan = await asyncio.to_thread(workload.point, conc)
            _warn_inexact(plan)
            self.current = _Point(self, plan, transport, session)
            await self.current.run()
            self.points.append(self.current.outcome)
            self.current = None

    def finish(self, *, interrupted: bool) -> SweepOutcome:
        if self._finished is not None:
            return self._finished
        if self.current is not None:  # the interrupted point: keep what it measured
            if self.current.started:
                self.points.append(self.current.finalize(complete=False, after=None))
            else:
                self.current.sink.close()  # stopped during warmup: nothing was measured
            self.current = None
        failed = tuple(p.conc for p in self.points if p.error_rate > self.spec.max_error_rate)
        self._write_sweep_files(interrupted)
        self._finished = SweepOutcome(self.results_dir, self.run_id, tuple(self.points),
                                      interrupted, failed)
        return self._finished

    def _write_sweep_files(self, interrupted: bool) -> None:
        from loadgen.sinks.files import format_table, plot_sweep, sweep_rows, write_csv

        results = [p.result for p in self.points]
        run = {
            "run_id": self.run_id, "loadgen_version": __version__, "target": self.target,
            "base_url": self.base_url, "started_unix": self.started_unix,
            "finished_unix": time.time(), "interrupted": interrupted,
            "settings": _settings(self.spec),
            "server": self.server.to_json() if self.server else None,
            "points": [{"conc": p.conc, "complete": p.complete, "file": p.path.name,
                        "error_rate": p.error_rate} for p in self.points],
        }
        (self.results_dir / "run.json").write_bytes(
            orjson.dumps(run, option=orjson.OPT_INDENT_2 | orjson.OPT_NON_STR_KEYS))
        if not results:
            return
        rows = sweep_rows(results)
        write_csv(self.results_dir / "sweep.csv", rows)
        print(format_table(rows))
        with contextlib.suppress(Exception):  # a plot must never cost the measurements
            plot_sweep(self.results_dir / "sweep.png", results)


def _warn_inexact(plan: PointPlan) -> None:
    lengths = plan.input_len_fields()
    if lengths["input_len_approximate"]:
        print(f"loadgen: WARNING: conc {plan.conc}: {lengths['input_len_mismatches']} prompts "
              f"are not of the requested length (up to {lengths['input_len_max_abs_diff']} "
              "tokens off): this tokenizer cannot give them exactly "
              f"({plan.synthesis_note}); input_lens hold their true lengths", file=sys.stderr)


def _settings(spec: RunSpec) -> dict[str, Any]:
    settings = dataclasses.asdict(spec)
    settings.pop("api_key", None)  # never write a credential into results
    settings["headers"] = [name for name, _ in spec.headers]  # names only: may hold tokens
    return {k: str(v) if isinstance(v, Path) else v for k, v in settings.items()}


class _Point:
    """One concurrency point: warmup, measured requests, records, result."""

    def __init__(self, sweep: _Sweep, plan: PointPlan, transport: Transport,
                 session: aiohttp.ClientSession) -> None:
        self.sweep = sweep
        self.plan = plan
        self.transport = transport
        self.session = session
        self.records: list[RequestRecord] = []
        path = sweep.results_dir / f"requests_conc_{plan.conc}.jsonl"
        path.unlink(missing_ok=True)  # a reused --results dir must not mix two runs' records
        self.sink = JsonlSink(path)
        self.before: ServerSnapshot | None = None
        self.started = False
        self.warmup_failed = 0
        self.cpu_start = 0.0
        # CPU of the measured phase only: not the /metrics scrape, GC or summarize after it.
        self.cpu_seconds: float | None = None
        self.loop_lag = LoopLag()
        self.health: dict[str, Any] | None = None
        self.outcome: PointOutcome

    async def run(self) -> None:
        spec, conc, hooks = self.sweep.spec, self.plan.conc, self.sweep.hooks
        await closed_loop(self.plan.warmup, conc, self._send_warmup)
        self.before = await scrape_metrics(self.session, self.sweep.base_url)
        hooks.point_started(conc, len(self.plan.measured))
        self.started = True
        self.cpu_start = time.process_time()
        self.loop_lag.start()
        deadline = deadline_after(spec.duration_s, perf_counter_ns())
        with no_gc_pauses():
            try:
                if spec.request_rate is None:
                    await closed_loop(self.plan.measured, conc, self._send,
                                      deadline_ns=deadline)
                else:
                    offsets = arrival_offsets_ns(len(self.plan.measured), spec.request_rate,
                                                 spec.burstiness,
                                                 point_rng(spec, conc, ARRIVALS))
                    await open_loop(self.plan.measured, conc, self._send, offsets,
                                    deadline_ns=deadline)
            finally:  # before the deferred collection, which is not the point's
                self.health = self.loop_lag.stop()
                self.cpu_seconds = time.process_time() - self.cpu_start
        after = await scrape_metrics(self.session, self.sweep.base_url)
        self.outcome = self.finalize(complete=True, after=after)

    async def _send_warmup(self, request: RequestSpec, scheduled_ns: int) -> RequestRecord:
        record = await self.transport.send(
            request, x_request_id=x_request_id(self.sweep.run_id, self.plan.conc,
                                               request.index, warmup=True),
            conc=self.plan.conc, scheduled_ns=scheduled_ns, on_record=_discard)
        if record.error is not None:  # not a measurement, but a sign worth reporting
            self.warmup_failed += 1
        return record

    async def _send(self, request: RequestSpec, scheduled_ns: int) -> RequestRecord:
        self.sweep.hooks.request_started(self.plan.conc)
        return await self.transport.send(
            request, x_request_id=x_request_id(self.sweep.run_id, self.plan.conc, request.index),
            conc=self.plan.conc, scheduled_ns=scheduled_ns, on_record=self._on_record)

    def _on_record(self, record: RequestRecord) -> None:
        self.records.append(record)
        self.sink.write(record)
        self.sweep.hooks.request_finished(record)

    def finalize(self, *, complete: bool, after: ServerSnapshot | None) -> PointOutcome:
        from loadgen.sinks.files import write_point

        self.sink.close()
        spec, sweep = self.sweep.spec, self.sweep
        ctx = PointContext(conc=self.plan.conc, input_len=spec.isl, output_len=spec.osl,
                           spec_tokens=spec.spec_tokens, slos=spec.slos_ms,
                           percentiles=spec.percentiles, num_gpus=spec.num_gpus)
        result = summarize(self.records, ctx, server_before=self.before,
                           server_after=after if complete else None)
        server = sweep.server
        cpu = self.cpu_seconds
        if cpu is None:  # stopped before the measured phase ended
            cpu = time.process_time() - self.cpu_start
        chunks = result.get("total_chunks") or 0
        result.update({
            # client health: this process's CPU over the measured phase (a loaded client
            # stamps late); per chunk it is the client's cost of ingesting one event
            "client_cpu_seconds": cpu,
            "client_cpu_per_chunk_us": cpu / chunks * 1e6 if chunks else None,
            **(self.health or self.loop_lag.stop()),
            "complete": complete, "target": sweep.target, "run_id": sweep.run_id,
            "model_id": server.model if server else spec.model, "endpoint_type": "openai",
            "endpoint": spec.endpoint, "base_url": sweep.base_url, "backend": "vllm",
            "input_len": spec.isl, "output_len": spec.osl, "range_ratio": spec.range_ratio,
            "request_rate": spec.request_rate if spec.request_rate is not None else "inf",
            "burstiness": spec.burstiness, "planned_requests": len(self.plan.measured),
            "warmup_requests": len(self.plan.warmup), "warmup_failed": self.warmup_failed,
            "loadgen_version": __version__,
            "tokenizer_check": server.tokenize_check if server else None,
            **self.plan.input_len_fields(),
        })
        path = write_point(sweep.results_dir, result)
        sweep.hooks.point_finished(self.plan.conc, result)
        return PointOutcome(self.plan.conc, result, complete, path)


def _discard(_record: RequestRecord) -> None:
    """Warmup records are not measurements."""
