"""The `loadgen` command: subcommands, signals, and the one map from errors to exit codes.

`loadgen [run] ...` measures a server, `loadgen sim ...` runs the simulator, `loadgen
serve ...` runs the sidecar. Every run-level failure is a `LoadgenError`; `_guarded`
turns it into one line on stderr and its exit status, here and nowhere else.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
from collections.abc import Awaitable, Sequence
from typing import TYPE_CHECKING

from loadgen.config.args import parse_run_args
from loadgen.config.spec import RunSpec
from loadgen.errors import Interrupted, LoadgenError, UsageError

if TYPE_CHECKING:
    from loadgen.run.observers import RunObserver


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] == "sim":
        from loadgen.sim.cli import main as sim_main

        return int(sim_main(args[1:]))
    if args and args[0] == "serve":
        from loadgen.sidecar.service import main as serve_main

        return int(serve_main(args[1:]))
    if args and args[0] == "run":
        args = args[1:]
    try:
        spec, metrics_port = parse_run_args(args, os.environ)
    except LoadgenError as exc:
        return _report(exc)
    return run(spec, metrics_port=metrics_port)


def run(spec: RunSpec, *, metrics_port: int | None = None) -> int:
    """Run the sweep on uvloop; Ctrl-C/SIGTERM stop it cleanly (partial results kept)."""
    import uvloop

    return int(uvloop.run(_guarded(_run(spec, metrics_port), spec)))


def _report(exc: LoadgenError) -> int:
    print(f"loadgen: error: {exc}", file=sys.stderr)
    return exc.exit_code


async def _guarded(work: Awaitable[int], spec: RunSpec) -> int:
    """Signals cancel the run; every LoadgenError becomes its line and exit status."""
    loop = asyncio.get_running_loop()
    task = asyncio.current_task()
    assert task is not None
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    try:
        return await work
    except asyncio.CancelledError:
        stopped = Interrupted(f"interrupted; everything measured so far is in "
                              f"{spec.results_dir} (the last point is marked complete: false)")
        print(f"loadgen: {stopped}", file=sys.stderr)
        return stopped.exit_code
    except LoadgenError as exc:
        return _report(exc)
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _metrics_model_label(spec: RunSpec) -> str:
    """The `model` label of live metrics: the served name, so the dashboard can put
    the server's own `vllm:` series (labelled model_name) beside loadgen's."""
    if spec.model:
        return spec.model
    if spec.sim:
        from loadgen.sim.config import build_parser as sim_parser

        return str(sim_parser().parse_known_args(list(spec.sim_args))[0].model)
    import aiohttp

    from loadgen.client.preflight import find_model

    assert spec.base_url is not None
    async with aiohttp.ClientSession() as session:
        name, _ = await find_model(session, spec.base_url.rstrip("/"), None)
    return name


async def _run(spec: RunSpec, metrics_port: int | None) -> int:
    if metrics_port is None:
        return await _run_sweep(spec, None)
    from loadgen.sinks.prometheus import live_metrics

    model = await _metrics_model_label(spec)
    stack = contextlib.AsyncExitStack()
    try:  # bind before the sweep, so a taken port fails fast and alone
        server, observer = await stack.enter_async_context(live_metrics(
            model=model, endpoint=spec.endpoint, points=len(spec.conc),
            spec_tokens=spec.spec_tokens, port=metrics_port))
    except OSError as exc:
        raise UsageError(f"--metrics-port {metrics_port}: {exc.strerror or exc}; "
                         "pick a free port (0 = any)") from None
    async with stack:
        print(f"loadgen: live metrics at http://{server.host}:{server.port}/metrics",
              file=sys.stderr)
        return await _run_sweep(spec, observer)


async def _run_sweep(spec: RunSpec, observer: RunObserver | None) -> int:
    from loadgen.run.sweep import run_sweep

    outcome = await run_sweep(spec, observer=observer)
    if outcome.nothing_to_resume:
        print(f"loadgen: every point of the run in {outcome.results_dir} is complete; "
              "nothing to resume", file=sys.stderr)
        return 0
    print(f"loadgen: results in {outcome.results_dir}", file=sys.stderr)
    for conc in outcome.failed_points:
        point = next(p for p in outcome.points if p.conc == conc)
        print(f"loadgen: conc {conc}: error rate {point.error_rate:.1%} exceeds "
              f"--max-error-rate {spec.max_error_rate:.1%}", file=sys.stderr)
    return outcome.exit_code
