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
Ctrl-C, SIGTERM or SIGHUP stops the sidecar: the active run is cancelled, what it
measured is kept, and the process exits 0.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry

from loadgen.client.http_session import (
    MAX_JSON_BYTES,
    REFUSED,
    open_session,
    read_capped,
    refused_line,
)
from loadgen.config.redact import redact_json, redact_text
from loadgen.config.spec import SpecError
from loadgen.run.ids import RUN_ID
from loadgen.sidecar.auth import auth_middleware
from loadgen.sidecar.canary import Canary, CanarySettings
from loadgen.sidecar.launch import RunLauncher
from loadgen.sidecar.options import parse_body, plan_for, spec_for
from loadgen.sidecar.result_files import (
    NotServed,
    list_beneath,
    open_beneath,
    read_beneath,
    stream_file,
)
from loadgen.sidecar.runs import Busy, RunManager, RunRecord
from loadgen.sidecar.settings import ServiceConfig, check_exposure
from loadgen.sinks.guarded_http import (
    BodyRefused,
    guarded_app,
    read_body,
    start_guarded,
)
from loadgen.sinks.prometheus import LoadgenMetrics, metrics_handler
from loadgen.wording import printable

log = logging.getLogger("loadgen.serve")
# GET /results parses each JSON file; a point file is ~10 KB, anything this big is not one.
MAX_PARSED_JSON_BYTES = 16 * 1024 * 1024
READY_TIMEOUT_S = 3.0
# what /readyz names of the target's model list when our model is not on it
MAX_NAMES, NAME_CHARS = 8, 80


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
        self.launcher = RunLauncher(config, self.metrics)

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
            raw = await read_body(request)
        except BodyRefused as exc:
            response = error(exc.status, str(exc))
            response.force_close()  # the rest of that body is not waited for
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
                specs, points = [lane.spec for lane in plan.lanes], plan.points
                sweep = self.launcher.lanes
            else:
                spec = spec_for(self.config, options, probe_dir)
                specs, points, sweep = [spec], len(spec.load.conc), self.launcher.sweep
            if self.manager.active_id is not None:
                return error(
                    409, f"run {self.manager.active_id} is still running; DELETE it or wait"
                )
            for one in specs:  # after the busy check: building prompts takes the run's CPU
                await self.launcher.check_workload(one)
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
            async with self.session.get(url) as resp:
                if resp.status != 200:
                    return error(503, redact_text(f"{url} answered HTTP {resp.status}"))
                body = orjson.loads(await read_capped(resp, MAX_JSON_BYTES))
        except REFUSED as exc:  # an answer, but not one loadgen reads
            return error(503, redact_text(refused_line(url, exc)))
        except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
            return error(503, redact_text(f"{url} unreachable: {type(exc).__name__}: {exc}"))
        listed = body.get("data") if isinstance(body, dict) else None
        served = (
            [m.get("id") for m in listed if isinstance(m, dict)] if isinstance(listed, list) else []
        )
        if self.config.model not in served:
            names = ", ".join(printable(str(name), NAME_CHARS) for name in served[:MAX_NAMES])
            return error(503, f"target serves [{names}], not {self.config.model!r}")
        return json_response({"ready": True, "model": self.config.model})


@asynccontextmanager
async def running_service(config: ServiceConfig) -> AsyncIterator[Service]:
    """The sidecar on config.host:config.port (0 = a free port, in `service.port`)."""
    check_exposure(config)
    # /readyz's session: unauthenticated callers make it fetch, so it is bounded as every
    # other connection loadgen opens (client/http_session.py)
    async with open_session(timeout_s=READY_TIMEOUT_S, max_connections=4) as session:
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
