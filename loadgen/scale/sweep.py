"""A sweep with its driver chosen: this process, or the worker pool (--workers N or auto).

The engine's sweep_points runs whatever driver it is given and never imports this package;
this is where `--workers auto` is resolved (and said) and the pool's driver is picked.
"""

from __future__ import annotations

import asyncio
from time import perf_counter_ns

from tokenizers import Tokenizer

from loadgen.config.spec import RunSpec
from loadgen.run import sweep as engine
from loadgen.run.backend import Backend
from loadgen.run.cache_control import CacheControl
from loadgen.run.driver import Drive, in_process
from loadgen.run.observers import RunObserver, RunOutputs
from loadgen.run.profiler_control import ProfilerControl
from loadgen.run.scheduler import Clock, Sleep
from loadgen.run.sweep import SweepOutcome
from loadgen.scale.pool_driver import pool_drive, resolve_workers


def drive_for(spec: RunSpec) -> Drive:
    """The driver of a run whose --workers is resolved."""
    return in_process if spec.processes.workers == 1 else pool_drive


async def run_sweep(
    spec: RunSpec,
    *,
    observer: RunObserver | None = None,
    tokenizer: Tokenizer | None = None,
    backend: Backend | None = None,
    clock: Clock = perf_counter_ns,
    sleep: Sleep = asyncio.sleep,
    outputs: RunOutputs | None = None,
    cache: CacheControl | None = None,
    profiler: ProfilerControl | None = None,
) -> SweepOutcome:
    """loadgen.run.sweep.sweep_points, with the points on as many processes as --workers says."""
    spec = resolve_workers(spec)
    return await engine.sweep_points(
        spec,
        observer=observer,
        tokenizer=tokenizer,
        backend=backend,
        clock=clock,
        sleep=sleep,
        outputs=outputs,
        drive=drive_for(spec),
        cache=cache,
        profiler=profiler,
    )
