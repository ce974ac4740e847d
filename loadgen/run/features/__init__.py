"""The per-point features of a run, in one place: checked against the server once,
before the first point (a server that cannot do what was asked stops the run there, in
one line), then built afresh for each point as extensions of its life (lifecycle.py),
in the order their hooks run.

A new per-point feature is a module here with its Extension, and a line in `for_point`.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from dataclasses import dataclass

import aiohttp

from loadgen.client.cache_reset import HttpCacheReset, reset_servers
from loadgen.client.gpu_metrics import PowerCsvTail, check_gpu_metrics_urls, gpu_metrics_urls
from loadgen.client.server_metrics import metrics_roles
from loadgen.client.server_profiler import HttpProfiler
from loadgen.config.spec import RunSpec
from loadgen.config.telemetry import metrics_source
from loadgen.errors import UsageError
from loadgen.run.backend import Backend, ServerSide
from loadgen.run.cache_control import CacheControl
from loadgen.run.embedded_sim import SimulatorLog
from loadgen.run.extension import Extension
from loadgen.run.features.cache_reset import CacheReset
from loadgen.run.features.profiler_window import ProfilerWindow
from loadgen.run.features.server_roles import ServerRoles
from loadgen.run.features.server_settle import ServerSettled
from loadgen.run.features.shard_barrier import ShardStart
from loadgen.run.features.simulator_lateness import SimulatorLateness
from loadgen.run.features.taints import Taints
from loadgen.run.features.target_precision import TargetPrecisionStop
from loadgen.run.features.telemetry import PointTelemetry
from loadgen.run.features.ttft_parts import TtftParts, disaggregated
from loadgen.run.point_records import RunContext
from loadgen.run.profiler_control import ProfilerControl
from loadgen.run.shard_sync import ShardBarrier, StartBarrier


@dataclass(frozen=True, slots=True)
class Features:
    """What the run's points share of their features (each None: not asked for)."""

    cache: CacheControl | None = None  # --reset-prefix-cache
    profiler: ProfilerControl | None = None  # --profile-conc
    barrier: StartBarrier | None = None  # --shard-sync's directory or --coordinator
    simulator_log: SimulatorLog | None = None  # --sim: the simulator loadgen started
    power_csv: PowerCsvTail | None = None  # --gpu-power-csv, read as it grows
    roles: dict[str, str] | None = None  # --server-metrics ROLE=URL: each URL's role

    def for_point(
        self, context: RunContext, conc: int, extra: Sequence[Extension] = ()
    ) -> list[Extension]:
        """A point's extensions, in the order their hooks run (`extra`: the driver's own,
        e.g. a session point's fields), the ones that close last first."""
        spec = context.spec
        profiled = conc in spec.target.profile_conc
        found: list[Extension | None] = [
            PointTelemetry(spec, context.backend, self.power_csv, conc, context.trial),
            ServerRoles(self.roles, spec.scoring.spec_tokens) if self.roles is not None else None,
            TtftParts(self.roles) if self.roles is not None and disaggregated(self.roles) else None,
            CacheReset(self.cache, conc, after_warmup=spec.target.reset_after_warmup)
            if self.cache is not None
            else None,
            ShardStart(self.barrier, conc) if self.barrier is not None else None,
            ProfilerWindow(self.profiler, context.run_id, conc)
            if self.profiler is not None and profiled
            else None,
            SimulatorLateness(self.simulator_log) if self.simulator_log is not None else None,
            Taints(context.backend),
            ServerSettled(context.watch) if context.watch is not None else None,
            TargetPrecisionStop(target, conc, spec.load.measured_requests(conc))
            if (target := spec.load.target_precision) is not None
            else None,
            *extra,
        ]
        return [ext for ext in found if ext is not None]


async def run_features(
    spec: RunSpec,
    backend: Backend,
    side: ServerSide,
    *,
    cache: CacheControl | None = None,
    profiler: ProfilerControl | None = None,
    link: StartBarrier | None = None,
) -> Features:
    """The features `spec` asks for, each checked against the server now (`cache` and
    `profiler`: given instead of the HTTP ones, as tests give a backend; `link`: the
    coordinator's, which lines the shards up instead of --shard-sync's directory)."""
    telemetry = spec.telemetry
    if telemetry.gpu_metrics:
        await check_gpu_metrics_urls(gpu_metrics_urls(telemetry.gpu_metrics, backend.base_url))
    if spec.target.reset_prefix_cache:
        cache = cache or HttpCacheReset(
            _session(side, "--reset-prefix-cache", "CacheControl"),
            reset_servers(backend.base_url, telemetry.server_metrics),
            timeout_s=spec.target.reset_timeout_s,
            reset_external=spec.target.reset_external,
        )
        await cache.check()  # a server without the endpoint stops the run here
    else:
        cache = None
    if spec.target.profile_conc:
        profiler = profiler or HttpProfiler(
            _session(side, "--profile-conc", "ProfilerControl"), backend.base_url
        )
        await profiler.check()
        print(
            f"loadgen: profiling conc {', '.join(map(str, spec.target.profile_conc))} (those "
            f"points' numbers are a slowed server's): the server writes its trace files "
            f"{profiler.where}",
            file=sys.stderr,
        )
    else:
        profiler = None
    barrier = link
    if spec.processes.shard_sync is not None:
        shards = ShardBarrier(
            spec.processes.shard_sync, spec.processes.shard_index, spec.processes.shard_count
        )
        shards.check_fresh()
        barrier = shards
    return Features(
        cache=cache,
        profiler=profiler,
        barrier=barrier,
        simulator_log=side.simulator_log,
        roles=metrics_roles(telemetry.server_metrics, backend.base_url)
        if any(metrics_source(e)[1] != e for e in telemetry.server_metrics)
        else None,
        power_csv=PowerCsvTail(telemetry.gpu_power_csv)
        if telemetry.gpu_power_csv is not None
        else None,
    )


def _session(side: ServerSide, flag: str, control: str) -> aiohttp.ClientSession:
    """The run's HTTP session, which a feature's requests go through."""
    if side.session is None:
        raise UsageError(f"{flag}: this backend is not an HTTP server; pass its {control}")
    return side.session
