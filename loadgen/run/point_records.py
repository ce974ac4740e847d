"""A point's records and the result made of them: what every point shares (RunContext),
the measured records as they arrive (JSONL, the server watch), the watchers beside them
(point_telemetry.py: gauges, power, the /metrics series), and `PointRecords.finalize`,
which writes the point file and its outputs. The live point (point.py) and the worker
pool (scale/pool.py) both fill one.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from loadgen import __version__
from loadgen.client.gpu_metrics import (
    PowerCsvTail,
)
from loadgen.client.preflight import ServerInfo
from loadgen.client.server_metrics import Scrape, metrics_urls
from loadgen.client.transport import tainted
from loadgen.config.redact import redact_url
from loadgen.config.spec import RunSpec
from loadgen.metrics.energy import PowerInput
from loadgen.metrics.gpu_power_csv import point_gpu_power_csv
from loadgen.metrics.server import ServerSnapshot
from loadgen.metrics.server_series import PointCapture
from loadgen.metrics.server_urls import per_url_fields
from loadgen.metrics.submission import SubmissionRules
from loadgen.records import RequestRecord
from loadgen.results.files import ResultsWriteError, write_atomic
from loadgen.results.jsonl import JsonlSink
from loadgen.results.outcome import PointOutcome, Stop
from loadgen.results.point import (
    CacheState,
    PointIdentity,
    PointResult,
    ProfileState,
    SessionMetrics,
    SimulatorHealth,
)
from loadgen.results.run_record import PointFacts
from loadgen.results.store import ResultsDir
from loadgen.run.assemble import PointCounts, PointParts, assemble_point
from loadgen.run.backend import Backend
from loadgen.run.cache_control import CacheControl
from loadgen.run.client_health import ProcessHealth
from loadgen.run.clock import ClockPair, clock_facts, read_pair
from loadgen.run.embedded_sim import SimulatorLog
from loadgen.run.observers import NoOutputs, RunObserver, RunOutputs
from loadgen.run.point_fields import (
    kv_samples,
    point_context,
    point_status,
    snapshot_json,
    warn_inexact,
)
from loadgen.run.point_telemetry import PointTelemetry
from loadgen.run.profiler_control import ProfilerControl, profile_prefix
from loadgen.run.scheduler import Clock, Sleep
from loadgen.run.server_watch import ServerWatch
from loadgen.run.shapes import load_shape
from loadgen.run.stops import SATURATED

# (records, server counters before, after the measured phase: None when not both read)
SessionFields = Callable[
    [Sequence[RequestRecord], ServerSnapshot | None, ServerSnapshot | None], SessionMetrics
]


@dataclass(frozen=True, slots=True)
class RunContext:
    """What every point of a sweep shares."""

    spec: RunSpec
    backend: Backend
    server: ServerInfo
    run_id: str
    results_dir: Path
    hooks: RunObserver
    clock: Clock
    sleep: Sleep
    # before each measured phase, once warmed up: wait for the other shards (--shard-sync)
    barrier: Callable[[int], Awaitable[None]] | None = None
    # fed every request outcome; holds new requests back while the server is suspected
    # gone (None in a worker process: its parent watches the records it gets)
    watch: ServerWatch | None = None
    # how prompts are built (workload.plan.synthesis_of): words, fitted (and why), dataset
    synthesis: tuple[str, str | None] = ("words", None)
    # the vLLM-format result and the like (a worker process writes none)
    outputs: RunOutputs = field(default_factory=NoOutputs)
    # the log of the simulator loadgen started (--sim): its lateness goes into each point
    simulator_log: SimulatorLog | None = None
    # --trials: the trial this context measures (1..N; its spec carries the trial's seed),
    # so its files are conc_<N>_trial_<k>.json and requests_conc_<N>_trial_<k>.jsonl
    trial: int | None = None
    # --gpu-power-csv: the file read as it grows, each point reading what was appended
    power_csv: PowerCsvTail | None = None
    # --reset-prefix-cache: empties the servers' prefix caches before each point (None:
    # not asked for, or a worker process: its parent resets)
    cache: CacheControl | None = None
    # --profile-conc: opens the server's profiler around the chosen points' measured
    # phases (None: not asked for, or a worker process: its parent opens it)
    profiler: ProfilerControl | None = None


class PointRecords:
    """A point's records as they finish (kept, appended to requests_conc_<N>.jsonl, shown
    live) and, at the end, its PointResult written as conc_<N>.json. The records may come
    from this process (`Point`) or from worker processes (scale/pool.py)."""

    def __init__(
        self, run: RunContext, conc: int, *, planned: int, warmup: int, slots: int
    ) -> None:
        self.run = run
        self.conc = conc
        self.planned = planned
        self.warmup = warmup
        self.slots = slots  # this run's slots of the point: conc, or its shard's share
        self.records: list[RequestRecord] = []
        path = ResultsDir(run.results_dir).requests_file(conc, run.trial)
        self.sink = JsonlSink(path)  # a fresh file: results_dir.prepare() cleared the way
        self.before = Scrape()
        # the gauges, power and /metrics series watched beside the requests
        self.telemetry = PointTelemetry(run.spec, run.backend, run.power_csv)
        # --aiperf-artifacts only: the primers/warmup requests
        self.warmup_records: list[RequestRecord] = []
        self.started = False
        self.clock: ClockPair | None = None
        # More fields a point kind adds from its records and the server's counters around
        # the measured phase (session runs: run/session_point.py); written with the rest.
        self.extra: SessionFields | None = None
        self.simulator_mark: int | None = None  # the simulator log's end at begin()
        self.cache = CacheState()  # uncontrolled until a reset says otherwise
        # taints found in worker processes (scale/pool.py), applied with this process's
        self.taints: dict[tuple[int, int], str] = {}
        self.profile = ProfileState()  # not profiled unless --profile-conc names the point
        self._profiling = False  # a window is open (or its start is under way)

    def taint(self, found: Mapping[tuple[int, int], str]) -> None:
        """Records another process's connections showed out of step (a worker's
        transport, `take_tainted`): applied when the point ends, as this process's are."""
        self.taints.update(found)

    async def reset_cache(self, *, warmed: bool) -> None:
        """--reset-prefix-cache: empty the servers' prefix caches, before the warmup
        (`warmed` False) or after it (--reset-after-warmup); the outcome is the point's
        cache_state. A failed reset does not stop the point: its file says so."""
        target = self.run.spec.target
        if self.run.cache is None or target.reset_after_warmup != warmed:
            return
        self.cache = await self.run.cache.reset()
        if self.cache.cache_state == "reset_failed":
            print(
                f"loadgen: WARNING: conc {self.conc}: prefix cache not reset: "
                f"{self.cache.cache_reset_detail}",
                file=sys.stderr,
            )

    async def start_profile(self) -> None:
        """--profile-conc: open the server's profiler window just before the measured
        phase (after the warmup and any cache reset). The point is profiled from the
        moment the start is sent: even a start that failed may have taken effect."""
        profiler = self.run.profiler
        if profiler is None or self.conc not in self.run.spec.target.profile_conc:
            return
        prefix = profile_prefix(self.run.run_id, self.conc)
        self.profile = ProfileState(
            profiled=True, profile_prefix=prefix, profile_trace=f"{prefix}_* {profiler.where}"
        )
        self._profiling = True
        error = await profiler.start(prefix)
        if error is not None:
            self._profile_failed(f"start: {error}")

    async def stop_profile(self) -> None:
        """Close the window opened for this point, also when the point was stopped; a
        failure is the point's `profile_error`, never the run's end."""
        profiler = self.run.profiler
        if not self._profiling or profiler is None:
            return
        self._profiling = False
        error = await profiler.stop()
        if error is not None:
            self._profile_failed(f"stop: {error}")
            return
        print(
            f"loadgen: conc {self.conc}: profiled (its numbers are a slowed server's); "
            f"the server wrote its trace files {self.profile.profile_trace}",
            file=sys.stderr,
        )

    def _profile_failed(self, why: str) -> None:
        before = self.profile.profile_error
        self.profile = msgspec.structs.replace(
            self.profile, profile_error=f"{before}; {why}" if before else why
        )
        print(f"loadgen: WARNING: conc {self.conc}: profiler window {why}", file=sys.stderr)

    async def start_power(self) -> None:
        """--gpu-metrics: sampled once before the measured phase starts, so the samples
        bracket its first send."""
        await self.telemetry.start_power()

    def begin(self, before: Scrape) -> None:
        """The measured phase starts now (the server's counters were just read)."""
        self.before, self.started, self.clock = before, True, read_pair()
        log = self.run.simulator_log
        self.simulator_mark = log.mark() if log is not None else None
        self.telemetry.start_gauges()
        self.run.hooks.point_started(self.conc, self.planned)

    async def open_series(self) -> None:
        """--aiperf-artifacts: the server series' first scrape, awaited before the
        counters are read for the measured phase (so no request falls before it)."""
        await self.telemetry.open_series()

    async def scrape_after(self) -> Scrape:
        """The measured phase is over: the gauges watched during it, then the counters."""
        await self.telemetry.stop(self.records)
        return await self.run.backend.scrape()

    def add(self, record: RequestRecord) -> None:
        self.records.append(record)
        if self.run.watch is not None:
            self.run.watch.observe(record)
        self.sink.write(record)  # ResultsWriteError stops the run (records so far intact)
        self.run.hooks.request_finished(record)

    def close(self) -> None:
        """Stopped during warmup: nothing was measured."""
        with contextlib.suppress(ResultsWriteError):  # the run is stopping already
            self.sink.close()

    def finalize(
        self,
        *,
        complete: bool,
        after: Scrape | None,
        processes: Sequence[ProcessHealth],
        warmup_failed: int,
        stop: Stop | None = None,
    ) -> PointOutcome:
        """Summarize and write conc_<N>.json. A write that fails is on the outcome
        (`write_error`), not raised: a stopped point is finalized on the way out of a run
        that is already stopping, and the caller decides."""
        write_error: ResultsWriteError | None = None
        try:
            self.sink.close()
            self._apply_taints()
        except ResultsWriteError as exc:
            write_error = exc
        self.telemetry.cancel()  # interrupted: no watcher outlives the point
        result = self._result(complete, after, processes, warmup_failed, stop)
        warn_inexact(result)
        store = ResultsDir(self.run.results_dir)
        path = store.point_file(self.conc, self.run.trial)
        try:
            store.write_point(result, self.run.trial)
            power_series = self.telemetry.power_series
            if power_series is not None:
                write_atomic(
                    store.gpu_power_file(self.conc, self.run.trial),
                    point_gpu_power_csv(power_series, self.records).encode(),
                )
            if self.run.trial is None:  # a trial's point is not the published one
                self.run.outputs.point_written(
                    store, result, self.records, complete, self._capture()
                )
        except ResultsWriteError as exc:
            write_error = write_error or exc
        self.run.hooks.point_finished(self.conc, result)
        return PointOutcome(
            self.conc, result, complete, path, self._facts(after if complete else None), write_error
        )

    def _apply_taints(self) -> None:
        """Records whose connection, after they were written, got bytes no request asked
        for (client/native/protocol.py): made malformed here and in the JSONL, rewritten
        whole (rare: only a server answering out of step); with --workers, what the
        workers found reaches `taints` through taint()."""
        found: dict[tuple[int, int], str] = {**self.taints, **self.run.backend.take_tainted()}
        if not found:
            return
        changed = False
        for i, record in enumerate(self.records):
            why = found.get((record.request_id, record.start_ns))
            if why is not None and record.ok:
                self.records[i] = tainted(record, why)
                changed = True
        if changed:
            write_atomic(self.sink.path, b"".join(r.to_json() + b"\n" for r in self.records))

    def _capture(self) -> PointCapture | None:
        """--aiperf-artifacts: what the sink needs beyond the records (else None)."""
        if self.run.spec.output.aiperf_artifacts is None:
            return None
        return PointCapture(
            warmup=tuple(self.warmup_records),
            scrapes=tuple(self.telemetry.scrapes),
            offset_ns=(self.clock or read_pair()).offset_ns,
            # the URLs the backend scrapes (the engine's own path, e.g. TensorRT-LLM's
            # /prometheus/metrics); a test backend without them: the configured ones
            metrics_urls=getattr(self.run.backend, "metrics_urls", None)
            or metrics_urls(self.run.spec.telemetry.server_metrics, self.run.backend.base_url),
        )

    def _facts(self, after: Scrape | None) -> PointFacts:
        """run.json's facts for `loadgen merge`: the clock pairing and the raw counters
        before and after, summed and (--server-metrics) per URL."""
        by_url = bool(self.run.spec.telemetry.server_metrics)
        return PointFacts(
            clock=clock_facts(self.clock, read_pair()) if self.clock else None,
            server_before=snapshot_json(self.before.total),
            server_after=snapshot_json(after.total if after else None),
            server_before_by_url={u: snapshot_json(s) for u, s in self.before.each.items()}
            if by_url
            else None,
            server_after_by_url={u: snapshot_json(s) for u, s in after.each.items()}
            if by_url and after
            else None,
        )

    def _result(
        self,
        complete: bool,
        after: Scrape | None,
        processes: Sequence[ProcessHealth],
        warmup_failed: int,
        stop: Stop | None,
    ) -> PointResult:
        spec, telemetry = self.run.spec, self.telemetry
        # a saturated point ran its requests to their end: its counters are whole
        kept = complete or (stop is not None and stop.reason == SATURATED)
        server_after = after.total if kept and after is not None else None
        by_url = (
            per_url_fields(list(self.before.each), self.before.each, after.each, telemetry.gauges)
            if spec.telemetry.server_metrics and after
            else None
        )
        # A shard's own result: the steady window is that of its own slots.
        ctx = point_context(spec, self.slots)
        sessions = (
            self.extra(self.records, self.before.total, server_after)
            if self.extra is not None
            else None
        )
        parts = PointParts(
            identity=self._identity(),
            status=point_status(complete, stop),
            counts=PointCounts(self.planned, self.warmup, warmup_failed),
            processes=[p.to_json() for p in processes],
            clock_uncertainty_ms=0.0,  # one machine: every process read one CLOCK_MONOTONIC
            synthesis=self.run.synthesis,
            server_metrics_by_url=by_url,
            simulator=self._simulator(),
            sessions=sessions,
            power=PowerInput(
                telemetry.power_series, spec.telemetry.gpu_metrics_interval_s, spec.scoring.num_gpus
            )
            if telemetry.power_series is not None
            else None,
            slice_s=spec.load.slice_duration_s,
            kv_samples=kv_samples(telemetry.gauges, telemetry.gauge_times),
            stages_s=[seconds for _, seconds in spec.load.conc_stages],
            rules=SubmissionRules.of(spec),
            cache=self.cache,
            profile=self.profile,
        )
        return assemble_point(
            self.records,
            ctx,
            self.conc,
            parts,
            server_before=self.before.total,
            server_after=server_after,
        )

    def _simulator(self) -> SimulatorHealth:
        """How late the simulator loadgen started ran over the measured phase."""
        log = self.run.simulator_log
        if log is None or self.simulator_mark is None:
            return SimulatorHealth()
        return log.lateness_since(self.simulator_mark)

    def _identity(self) -> PointIdentity:
        run, spec = self.run, self.run.spec
        return PointIdentity(
            # a shard's own file holds its share only; `loadgen merge` writes the whole point
            shard=f"{spec.processes.shard_index}/{spec.processes.shard_count}"
            if spec.processes.shard_count > 1
            else None,
            shards_merged=1,
            target=run.backend.target,
            run_id=run.run_id,
            model_id=run.server.model,
            endpoint_type="openai",
            endpoint=spec.target.endpoint,
            base_url=redact_url(run.backend.base_url),
            backend="vllm",
            # the client that timed the streams: its per-chunk cost is in client_*
            http_client=spec.target.http_client,
            input_len=spec.workload.isl,
            output_len=spec.workload.osl,
            range_ratio=spec.workload.range_ratio,
            request_rate=load_shape(spec).rate_label,
            rate_stages=[list(stage) for stage in spec.load.rate_stages] or None,
            conc_stages=list(spec.load.conc_stages) or None,
            burstiness=spec.load.burstiness,
            ramp_up_strategy=spec.load.ramp_up_strategy,
            ramp_up_start_rps=spec.load.ramp_up_start_rps,
            ramp_up_end_rps=spec.load.ramp_up_end_rps,
            loadgen_version=__version__,
            tokenizer_check=run.server.tokenize_check,
        )
