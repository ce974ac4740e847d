"""A sweep with its driver chosen: this process, or the worker pool (--workers N or auto).

The engine's sweep_points runs whatever driver it is given and never imports this package;
this is where `--workers auto` is resolved (and said) and the pool's driver is picked.
"""

from __future__ import annotations

import dataclasses

from loadgen.config.spec import RunSpec
from loadgen.errors import UsageError
from loadgen.run import sweep as engine
from loadgen.run.driver import Drive, in_process
from loadgen.run.sweep import SweepOptions, SweepOutcome
from loadgen.scale.pool_driver import pool_drive, resolve_workers


def drive_for(spec: RunSpec) -> Drive:
    """The driver of a run whose --workers is resolved."""
    return in_process if spec.processes.workers == 1 else pool_drive


async def run_sweep(spec: RunSpec, options: SweepOptions | None = None) -> SweepOutcome:
    """loadgen.run.sweep.sweep_points, with the points on as many processes as --workers says."""
    options = options or SweepOptions()
    spec = resolve_workers(spec)
    if spec.processes.workers != 1 and options.backend is not None:
        # each worker sends to the server itself, over its own HTTP connections
        raise UsageError("--workers needs an HTTP server (--base-url or --sim)")
    return await engine.sweep_points(spec, dataclasses.replace(options, drive=drive_for(spec)))
