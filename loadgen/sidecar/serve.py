"""`loadgen serve`, the process: its flags, its signals and its event loop (the HTTP API
itself: sidecar/service.py)."""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
import signal
import sys
from collections.abc import Mapping
from pathlib import Path

from loadgen.config.redact import redact_text
from loadgen.sidecar import service
from loadgen.sidecar.service import log, running_service
from loadgen.sidecar.settings import TOKEN_ENV, ServiceConfig, ServiceError, check_exposure

# Each stops the sidecar as Ctrl-C does: the active run is cancelled, its files kept.
# SIGHUP too (the terminal or the ssh session went away): its default would end the
# process before the run's last point and run.json are written.
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loadgen serve",
        description=service.__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--target", required=True, help="base URL of the server, e.g. http://vllm:8000")
    p.add_argument("--model", required=True, help="served model name to benchmark")
    p.add_argument("--listen", default="127.0.0.1:9400", help="HOST:PORT (default %(default)s)")
    p.add_argument(
        "--data-dir",
        type=Path,
        default=Path("loadgen-data"),
        help="where runs and results are kept (default %(default)s)",
    )
    p.add_argument(
        "--canary-conc",
        type=int,
        default=0,
        help="steady canary load between runs at this concurrency (0 = off)",
    )
    p.add_argument(
        "--canary-interval",
        type=float,
        default=60.0,
        help="seconds between canary rounds (default %(default)s)",
    )
    p.add_argument(
        "--insecure-no-auth",
        action="store_true",
        help=f"allow a non-loopback --listen without {TOKEN_ENV}",
    )
    return p


def config_from_args(argv: list[str], env: Mapping[str, str]) -> ServiceConfig:
    args = build_parser().parse_args(argv)
    host, sep, port_text = args.listen.rpartition(":")
    if not sep or not host or not port_text.isdigit() or int(port_text) > 65535:
        raise ServiceError(f"--listen {args.listen!r}: expected HOST:PORT, e.g. 127.0.0.1:9400")
    if not args.target.startswith(("http://", "https://")):
        raise ServiceError(f"--target {args.target!r}: must start with http:// or https://")
    if args.canary_conc < 0 or args.canary_interval <= 0:
        raise ServiceError("--canary-conc must be >= 0 and --canary-interval > 0 seconds")
    config = ServiceConfig(
        target=args.target,
        model=args.model,
        host=host.strip("[]"),
        port=int(port_text),
        data_dir=args.data_dir,
        token=env.get(TOKEN_ENV) or None,
        canary_conc=args.canary_conc,
        canary_interval_s=args.canary_interval,
        insecure_no_auth=args.insecure_no_auth,
    )
    check_exposure(config)
    return config


async def serve_until_signalled(config: ServiceConfig) -> None:
    stopped_by: list[signal.Signals] = []
    stop = asyncio.Event()

    def on_signal(sig: signal.Signals) -> None:
        stopped_by.append(sig)
        stop.set()

    loop = asyncio.get_running_loop()
    for sig in STOP_SIGNALS:
        loop.add_signal_handler(sig, on_signal, sig)
    try:
        async with running_service(config) as sidecar:
            log.info(
                "loadgen serve: listening on http://%s:%d (target %s, model %s, auth %s)",
                config.host,
                sidecar.port,
                redact_text(config.target),
                config.model,
                "on" if config.token else "off",
            )
            await stop.wait()
            log.info(
                "loadgen serve: stopping on %s (cancelling the active run, flushing results)",
                stopped_by[0].name,
            )
    finally:
        for sig in STOP_SIGNALS:
            loop.remove_signal_handler(sig)


def main(argv: list[str] | None = None) -> int:
    """`loadgen serve`: on uvloop, as the CLI and the workers measure (a sweep started here
    must time the same loop); a ServiceError or a port it cannot bind goes up to
    loadgen.cli as one line."""
    import uvloop

    logging.basicConfig(level=logging.INFO, format="%(message)s", stream=sys.stderr)
    config = config_from_args(list(sys.argv[1:] if argv is None else argv), os.environ)
    try:
        uvloop.run(serve_until_signalled(config))
    except OSError as exc:
        raise ServiceError(
            f"cannot listen on {config.host}:{config.port}: "
            f"{exc.strerror or exc}; pick another --listen"
        ) from None
    return 0
