"""`loadgen serve`: the sidecar. An HTTP control API that runs sweeps against one target,
plus /metrics (live Prometheus), /healthz and /readyz.

  POST   /v1/runs                 {"conc": "4..64", "isl": 8192, ...} -> 202 {"id": ...}
                                  (400 invalid, even while busy; 409 a valid run while
                                  one is active); or a sweep file's
                                  document ({"lanes": [...]}, JSON or application/yaml):
                                  its lanes run one after another into results/<lane>/
  GET    /v1/runs                 every run, newest first (survives restarts)
  GET    /v1/runs/{id}            state, progress, per-point summaries
  GET    /v1/runs/{id}/results    the result files (point JSONs parsed, all files listed)
  GET    /v1/runs/{id}/files/{f}  one result file as stored
  DELETE /v1/runs/{id}            cancel; what was measured is kept
Security: with LOADGEN_API_TOKEN set, /v1/* needs `Authorization: Bearer <token>`;
a non-loopback --listen without a token is refused unless --insecure-no-auth. Secrets
in run options and the target URL are redacted in everything stored or returned; no
symbolic link below the data directory is listed or followed.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import ipaddress
import logging
import os
import signal
import sys
from collections.abc import AsyncIterator, Mapping
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry
from tokenizers import Tokenizer

from loadgen.config.redact import redact_json, redact_text
from loadgen.config.spec import RunSpec, SpecError
from loadgen.config.sweepfile import Lane
from loadgen.errors import UsageError
from loadgen.run.ids import RUN_ID
from loadgen.run.observers import FanoutObserver
from loadgen.sidecar.auth import auth_middleware, token_problem
from loadgen.sidecar.canary import Canary, CanarySettings
from loadgen.sidecar.options import parse_body, plan_for, spec_for
from loadgen.sidecar.result_files import (
    NotServed,
    list_beneath,
    open_beneath,
    read_beneath,
    stream_file,
)
from loadgen.sidecar.runs import (
    Busy,
    ProgressObserver,
    RunManager,
    RunRecord,
)
from loadgen.sinks.guarded_http import (
    DEFAULT_LIMITS,
    BodyTimeout,
    ServerLimits,
    guarded_app,
    read_body,
    start_guarded,
)
from loadgen.sinks.prometheus import LoadgenMetrics, MetricsObserver, metrics_handler
from loadgen.tokenizer import load_tokenizer

log = logging.getLogger("loadgen.serve")
TOKEN_ENV = "LOADGEN_API_TOKEN"
MAX_BODY_BYTES = 64 * 1024
# GET /results parses each JSON file; a point file is ~10 KB, anything this big is not one.
MAX_PARSED_JSON_BYTES = 16 * 1024 * 1024


class ServiceError(UsageError):
    """The sidecar cannot start as configured; the message says what to change."""


@dataclass(frozen=True, slots=True)
class ServiceConfig:
    target: str
    model: str
    host: str = "127.0.0.1"
    port: int = 9400
    data_dir: Path = Path("loadgen-data")
    token: str | None = None
    canary_conc: int = 0
    canary_interval_s: float = 60.0
    insecure_no_auth: bool = False
    max_body_bytes: int = MAX_BODY_BYTES
    # connections, header and body deadlines (tests shorten them)
    limits: ServerLimits = DEFAULT_LIMITS


def is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name may resolve anywhere: treat it as public


def check_exposure(config: ServiceConfig) -> None:
    problem = token_problem(config.token) if config.token else None
    if problem:
        raise ServiceError(f"{TOKEN_ENV} {problem}")
    if not config.token and not is_loopback(config.host) and not config.insecure_no_auth:
        raise ServiceError(
            f"refusing to listen on {config.host} without {TOKEN_ENV}: set {TOKEN_ENV} "
            "to a secret (e.g. `openssl rand -hex 16`), listen on 127.0.0.1, or pass "
            "--insecure-no-auth"
        )


def json_response(data: Any, status: int = 200) -> web.Response:
    return web.Response(
        body=orjson.dumps(data, option=orjson.OPT_SERIALIZE_NUMPY),
        status=status,
        content_type="application/json",
    )


def error(status: int, message: str) -> web.Response:
    return json_response({"error": message}, status)


class Service:
    """The HTTP handlers over a RunManager, the metrics and the canary."""

    def __init__(self, config: ServiceConfig, session: aiohttp.ClientSession) -> None:
        self.config = config
        self.session = session
        self.registry = CollectorRegistry()
        self.metrics = LoadgenMetrics(self.registry)
        self.manager = RunManager(config.data_dir)
        self.canary = Canary(
            CanarySettings(
                config.target,
                config.model,
                config.canary_conc,
                config.canary_interval_s,
                config.data_dir,
            ),
            self.metrics,
            self.manager.is_busy,
        )
        # Files are only ever opened below this (resolved once: the data directory itself
        # may be a link the operator made; nothing below it may be).
        self.root = config.data_dir.resolve()
        self.port = 0
        self._loaded_tokenizer: Tokenizer | None = None

    def app(self) -> web.Application:
        app = guarded_app(
            self.config.limits,
            log,
            "loadgen serve",
            client_max_size=self.config.max_body_bytes,
            middlewares=[auth_middleware(self.config.token)],
        )
        app.router.add_post("/v1/runs", self.post_run)
        app.router.add_get("/v1/runs", self.list_runs)
        app.router.add_get("/v1/runs/{id}", self.get_run)
        app.router.add_get("/v1/runs/{id}/results", self.get_results)
        app.router.add_get("/v1/runs/{id}/files/{name:.+}", self.get_file)
        app.router.add_delete("/v1/runs/{id}", self.delete_run)
        app.router.add_get("/metrics", metrics_handler(self.registry))
        app.router.add_get("/healthz", self.healthz)
        app.router.add_get("/readyz", self.readyz)
        return app

    async def post_run(self, request: web.Request) -> web.Response:
        try:
            raw = await read_body(request, self.config.limits)
        except BodyTimeout as exc:
            response = error(408, str(exc))
            response.force_close()  # the rest of a body that late is not waited for
            return response
        try:
            # in a thread: PyYAML takes up to ~0.6 s for a 64 KiB body at the bounds,
            # time /healthz and the scrapes must not wait for
            options = await asyncio.to_thread(parse_body, raw, request.content_type)
        except SpecError as exc:
            return error(400, str(exc))
        if not isinstance(options, dict):
            return error(
                400,
                "body must be a JSON object of run options, e.g. "
                '{"conc": "4..64", "isl": 1024, "osl": 256}, or a sweep document',
            )
        probe_dir = self.config.data_dir / "runs" / "pending"
        try:  # an invalid body is a 400 whether or not a run is active
            if "lanes" in options:
                plan = plan_for(self.config, options, probe_dir)
                specs, points, sweep = [lane.spec for lane in plan.lanes], plan.points, self._lanes
            else:
                spec = spec_for(self.config, options, probe_dir)
                specs, points, sweep = [spec], len(spec.load.conc), self._sweep
            if self.manager.active_id is not None:
                return error(
                    409, f"run {self.manager.active_id} is still running; DELETE it or wait"
                )
            for one in specs:  # after the busy check: building prompts takes the run's CPU
                await self._check_workload(one)
        except SpecError as exc:
            return error(400, str(exc))
        await self.canary.pause()
        try:
            # The record (run.json, GET) keeps the options redacted; the sweep the real ones.
            record = self.manager.start(options, points, functools.partial(sweep, options))
        except Busy as exc:
            return error(409, str(exc))
        return json_response(
            {"id": record.id, "state": record.state, "url": f"/v1/runs/{record.id}"}, 202
        )

    async def _tokenizer(self) -> Tokenizer:
        # Loaded once (~0.4 s), on first use: the sidecar's runs cannot pick a tokenizer.
        if self._loaded_tokenizer is None:
            self._loaded_tokenizer = await asyncio.to_thread(load_tokenizer)
        return self._loaded_tokenizer

    async def _check_workload(self, spec: RunSpec) -> None:
        """Options that parse but describe prompts that cannot be built are a 400 too."""
        from loadgen.run.sweep import probe_prompt

        await asyncio.to_thread(probe_prompt, spec, await self._tokenizer())

    async def _sweep(
        self,
        options: Mapping[str, Any],
        record: RunRecord,
        results_dir: Path,
        progress: ProgressObserver,
    ) -> None:
        from loadgen.run.measure import measure

        spec = spec_for(self.config, options, results_dir)
        metrics = MetricsObserver(
            self.metrics,
            model=self.config.model,
            endpoint=spec.target.endpoint,
            points=len(spec.load.conc),
            spec_tokens=spec.scoring.spec_tokens,
        )
        try:
            await measure(
                spec, observer=FanoutObserver(progress, metrics), tokenizer=await self._tokenizer()
            )
        finally:
            metrics.finished()

    async def _lanes(
        self,
        options: Mapping[str, Any],
        record: RunRecord,
        results_dir: Path,
        progress: ProgressObserver,
    ) -> None:
        """A sweep document's lanes, each with its own live-metrics observer."""
        from loadgen.run.lanes import run_lanes
        from loadgen.sinks.prometheus import MetricsObserver

        plan = plan_for(self.config, options, results_dir)
        current: list[MetricsObserver] = []

        def observer_for(lane: Lane) -> FanoutObserver:
            for done in current:  # the previous lane's series: nothing in flight any more
                done.finished()
            current[:] = [
                MetricsObserver(
                    self.metrics,
                    model=self.config.model,
                    endpoint=lane.spec.target.endpoint,
                    points=len(lane.spec.load.conc),
                    spec_tokens=lane.spec.scoring.spec_tokens,
                )
            ]
            return FanoutObserver(progress, current[0])

        try:
            outcome = await run_lanes(
                plan, observer_for=observer_for, tokenizer=await self._tokenizer()
            )
        finally:
            for done in current:
                done.finished()
        failed = [lane.name for lane in outcome.lanes if lane.state == "failed"]
        if failed:
            raise RuntimeError(f"lanes failed: {', '.join(failed)} (see results/lanes.json)")

    def _record(self, request: web.Request) -> RunRecord | None:
        run_id = request.match_info["id"]
        return self.manager.runs.get(run_id) if RUN_ID.match(run_id) else None

    async def list_runs(self, request: web.Request) -> web.Response:
        runs = sorted(self.manager.runs.values(), key=lambda r: r.id, reverse=True)
        return json_response({"runs": [r.summary() for r in runs]})

    async def get_run(self, request: web.Request) -> web.Response:
        record = self._record(request)
        if record is None:
            return error(404, f"no run {request.match_info['id']}")
        return json_response(record.to_json())

    def _results_path(self, record: RunRecord) -> str:
        return self.manager.results_dir(record.id).relative_to(self.manager.data_dir).as_posix()

    async def get_results(self, request: web.Request) -> web.Response:
        record = self._record(request)
        if record is None:
            return error(404, f"no run {request.match_info['id']}")
        base = self._results_path(record)
        files, points = [], []
        for listed in list_beneath(self.root, base):  # symbolic links are skipped
            files.append({"name": listed.name, "bytes": listed.size})
            if listed.name.endswith(".json"):
                with contextlib.suppress(NotServed, orjson.JSONDecodeError):
                    data = read_beneath(self.root, f"{base}/{listed.name}", MAX_PARSED_JSON_BYTES)
                    # redacted again: files written before loadgen redacted them
                    points.append({"file": listed.name, "result": redact_json(orjson.loads(data))})
        return json_response(
            {"id": record.id, "state": record.state, "files": files, "results": points}
        )

    async def get_file(self, request: web.Request) -> web.StreamResponse:
        record = self._record(request)
        name = request.match_info["name"]
        if record is None:
            return error(404, f"no run {request.match_info['id']}")
        try:
            # A link at any level below the data directory is refused, not followed.
            with open_beneath(self.root, f"{self._results_path(record)}/{name}") as fd:
                return await stream_file(request, fd, name)
        except NotServed:
            return error(404, f"no file {name} in run {record.id} (symbolic links are not served)")

    async def delete_run(self, request: web.Request) -> web.Response:
        record = self._record(request)
        if record is None:
            return error(404, f"no run {request.match_info['id']}")
        if not self.manager.is_active(record.id):
            return error(409, f"run {record.id} is not running (state {record.state})")
        await self.manager.cancel_active()
        # 202 if the engine is still flushing after the wait: GET shows when it is done.
        return json_response(record.to_json(), 202 if record.state == "running" else 200)

    async def healthz(self, request: web.Request) -> web.Response:
        return json_response({"status": "ok", "busy": self.manager.is_busy()})

    async def readyz(self, request: web.Request) -> web.Response:
        url = f"{self.config.target.rstrip('/')}/v1/models"
        try:
            async with self.session.get(url, timeout=aiohttp.ClientTimeout(total=3)) as resp:
                if resp.status != 200:
                    return error(503, redact_text(f"{url} answered HTTP {resp.status}"))
                body = await resp.json(content_type=None)
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            return error(503, redact_text(f"{url} unreachable: {type(exc).__name__}: {exc}"))
        served = [m.get("id") for m in body.get("data", []) if isinstance(m, dict)]
        if self.config.model not in served:
            return error(503, f"target serves {served}, not {self.config.model!r}")
        return json_response({"ready": True, "model": self.config.model})


@asynccontextmanager
async def running_service(config: ServiceConfig) -> AsyncIterator[Service]:
    """The sidecar on config.host:config.port (0 = a free port, in `service.port`)."""
    check_exposure(config)
    async with aiohttp.ClientSession() as session:
        service = Service(config, session)
        runner, service.port = await start_guarded(
            service.app(), config.host, config.port, shutdown_timeout=1.0
        )
        try:
            async with service.canary.running():
                try:
                    yield service
                finally:
                    await service.manager.cancel_active()
        finally:
            await runner.cleanup()


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="loadgen serve",
        description=__doc__,
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
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    async with running_service(config) as service:
        log.info(
            "loadgen serve: listening on http://%s:%d (target %s, model %s, auth %s)",
            config.host,
            service.port,
            redact_text(config.target),
            config.model,
            "on" if config.token else "off",
        )
        await stop.wait()
        log.info("loadgen serve: stopping (cancelling the active run, flushing results)")


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
