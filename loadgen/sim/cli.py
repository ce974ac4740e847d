"""`loadgen sim ...`: parse flags, then serve until SIGINT/SIGTERM."""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys

from loadgen.errors import SetupError
from loadgen.sim.config import SimConfig
from loadgen.sim.parser import build_parser, config_from_args
from loadgen.sim.server import running_simulator

__all__ = ["build_parser", "main"]


class SimSetupError(SetupError):
    """The simulator cannot serve where it was asked to (exit 1)."""


async def serve(config: SimConfig, host: str, port: int) -> None:
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    async with running_simulator(config, host=host, port=port) as sim:
        mtp = (
            f"{config.spec_method} ({config.rejection_sample_method}) K={config.spec_tokens}"
            f" acceptance={','.join(map(str, config.acceptance))}"
            if config.mtp
            else "no MTP"
        )
        print(
            f"loadgen sim: serving {config.model} at {sim.base_url} ({mtp}; "
            f"max_num_seqs={config.max_num_seqs})",
            file=sys.stderr,
            flush=True,
        )
        print(
            f"loadgen sim: GPU metrics at {sim.base_url}/gpu/metrics: {config.power.describe()}",
            file=sys.stderr,
            flush=True,
        )
        if config.pd is not None:
            prefills, decodes = config.pd
            urls = [f"prefill={sim.base_url}/workers/prefill-{i}/metrics" for i in range(prefills)]
            urls += [f"decode={sim.base_url}/workers/decode-{i}/metrics" for i in range(decodes)]
            print(
                f"loadgen sim: --pd {prefills}:{decodes}, KV link "
                f"{config.kv_bandwidth_gbps:g} GB/s "
                f"x {config.kv_bytes_per_token} B/token + {config.kv_latency_ms:g} ms; "
                f"--server-metrics frontend={sim.base_url}/metrics {' '.join(urls)}",
                file=sys.stderr,
                flush=True,
            )
        await stop.wait()
    print("loadgen sim: stopped", file=sys.stderr, flush=True)


def run_event_loop(config: SimConfig, host: str, port: int) -> None:
    try:
        import uvloop
    except ImportError:  # uvloop is a dependency, but the simulator runs without it
        asyncio.run(serve(config, host, port))
        return
    with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
        runner.run(serve(config, host, port))


def main(argv: list[str] | None = None) -> int:
    """`loadgen sim`: a bad flag or tokenizer, or a port it cannot bind, is raised (as a
    LoadgenError) for loadgen.cli to print as one line."""
    parser = build_parser()
    try:
        args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    except SystemExit as exc:  # --help
        return int(exc.code or 0)
    config = config_from_args(args)
    try:
        run_event_loop(config, args.host, args.port)
    except OSError as exc:
        raise SimSetupError(
            f"cannot serve on {args.host}:{args.port}: {exc.strerror}; pick another --port"
        ) from None
    except KeyboardInterrupt:
        return 130
    return 0
