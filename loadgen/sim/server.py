"""The simulator's aiohttp application and `running_simulator`, its lifecycle.

    async with running_simulator(SimConfig(...), host="127.0.0.1", port=0) as sim:
        ...  # sim.port, sim.base_url ("http://127.0.0.1:PORT"; OpenAI clients add "/v1")

It runs inside the caller's event loop: the engine is one task, requests are aiohttp
handlers. Leaving the block stops the engine (open streams are closed) and the server.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import orjson
from aiohttp import web
from aiohttp.typedefs import Handler
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from tokenizers import Tokenizer

from loadgen.sim.accounting import Accounting
from loadgen.sim.config import SimConfig
from loadgen.sim.detok import build_token_table
from loadgen.sim.dialects import SIM_DIALECTS, render
from loadgen.sim.dp import Engines
from loadgen.sim.handlers import GenerationHandlers, Tokenization, error_response, json_response
from loadgen.sim.metrics import SimMetrics
from loadgen.sim.pd import PdEngines
from loadgen.sim.power import PowerModel
from loadgen.sim.steplog import StepLog
from loadgen.sim.trace import TraceWriter
from loadgen.sim.validate import (
    ApiError,
    bad_request,
    check_model,
    check_token_ids,
    parse_json,
    query_bool,
)
from loadgen.sim.wire import (
    VLLM_VERSION,
    detokenize_body,
    models_body,
    tokenize_body,
    version_body,
)
from loadgen.tokenizer import decode, load_tokenizer

__all__ = ["RunningSimulator", "SimConfig", "SimServer", "running_simulator"]

MAX_BODY_BYTES = 256 * 1024 * 1024


@web.middleware
async def fastapi_errors(request: web.Request, handler: Handler) -> web.StreamResponse:
    """Unknown paths and methods answer as vLLM's FastAPI does: {"detail": ...} JSON."""
    try:
        return await handler(request)
    except web.HTTPNotFound:
        return json_response(b'{"detail":"Not Found"}', 404)
    except web.HTTPMethodNotAllowed as exc:
        response = json_response(b'{"detail":"Method Not Allowed"}', 405)
        response.headers["Allow"] = ", ".join(sorted(exc.allowed_methods))
        return response


def _registry_page(registry: CollectorRegistry) -> Handler:
    async def page(request: web.Request) -> web.Response:
        body = generate_latest(registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    return page


@dataclass(frozen=True, slots=True)
class RunningSimulator:
    config: SimConfig
    host: str
    port: int
    registry: CollectorRegistry
    power: PowerModel  # the GPUs behind /gpu/metrics (tests read the ground truth here)

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"


class SimServer:
    """All per-server state: tokenizer, token table, engine, metrics, trace."""

    def __init__(
        self, config: SimConfig, tokenizer: Tokenizer, registry: CollectorRegistry
    ) -> None:
        self.config = config
        self.registry = registry
        self.created = int(time.time())
        digest = hashlib.sha256(config.model.encode()).hexdigest()[:8]
        self.fingerprint = f"vllm-{VLLM_VERSION}-{digest}"
        self.metrics = SimMetrics(
            registry,
            model_name=config.model,
            max_model_len=config.max_model_len,
            spec_tokens=config.spec_tokens,
            engines=config.data_parallel_size,
        )
        self.trace = TraceWriter(config.trace_path) if config.trace_path else None
        self.step_log = StepLog(config.step_log_path) if config.step_log_path else None
        table = build_token_table(tokenizer)
        self.engine: Engines | PdEngines
        if config.pd is not None:  # the frontend's registry has the frontend's series only
            self.registry = CollectorRegistry()
            self.engine = PdEngines(config, self.registry, table, self.trace)
        else:
            self.engine = Engines(
                config, Accounting(self.metrics, self.trace, config.kv_cache_tokens), self.step_log
            )
        self.tokenization = Tokenization(tokenizer, config.add_bos)
        self.generation = GenerationHandlers(
            config, self.tokenization, table, self.engine, self.fingerprint
        )
        self.perm_id = "modelperm-" + secrets.token_hex(8)
        self.app = self._build_app()

    def _build_app(self) -> web.Application:
        app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=[fastapi_errors])
        app.router.add_get("/v1/models", self.models)
        app.router.add_get("/health", self.health)
        app.router.add_get("/version", self.version)
        dialect = SIM_DIALECTS.get(self.config.engine)
        if isinstance(self.engine, PdEngines):  # Dynamo's frontend and workers (sim/pd.py)
            app.router.add_get("/metrics", self.prometheus)
            for worker in self.engine.workers:
                app.router.add_get(worker.path, _registry_page(worker.registry))
        elif dialect is None:
            app.router.add_get("/metrics", self.prometheus)
        else:
            app.router.add_get(dialect.metrics_path, self.engine_prometheus)
        if self.config.engine == "trtllm":  # trtllm-serve's /metrics: JSON iteration stats
            app.router.add_get("/metrics", self.iteration_stats)
        if self.config.engine == "sglang":
            app.router.add_get("/get_server_info", self.sglang_server_info)
        if self.config.engine == "atom":
            app.router.add_get("/server_info", self.atom_server_info)
        app.router.add_get("/gpu/metrics", self.gpu_metrics)
        app.router.add_post("/tokenize", self.tokenize)
        app.router.add_post("/detokenize", self.detokenize)
        app.router.add_post("/v1/completions", self.generation.completions)
        app.router.add_post("/v1/chat/completions", self.generation.chat_completions)
        if self.config.dev_mode:  # vLLM registers its dev endpoints only then
            app.router.add_post("/reset_prefix_cache", self.reset_prefix_cache)
            app.router.add_get("/server_info", self.server_info)
        if self.engine.profiler is not None:  # vLLM: only with a --profiler-config
            app.router.add_post("/start_profile", self.start_profile)
            app.router.add_post("/stop_profile", self.stop_profile)
        return app

    async def models(self, request: web.Request) -> web.Response:
        c = self.config
        return json_response(
            models_body(c.model, c.root, c.max_model_len, self.created, self.perm_id)
        )

    async def health(self, request: web.Request) -> web.Response:
        return web.Response(status=200)

    async def version(self, request: web.Request) -> web.Response:
        return json_response(version_body())

    async def prometheus(self, request: web.Request) -> web.Response:
        body = generate_latest(self.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    async def engine_prometheus(self, request: web.Request) -> web.Response:
        """--engine: the same instruments in that engine's names (sim/dialects.py)."""
        vllm = generate_latest(self.registry).decode()
        body = render(SIM_DIALECTS[self.config.engine], vllm)
        return web.Response(text=body, content_type="text/plain", charset="utf-8")

    async def iteration_stats(self, request: web.Request) -> web.Response:
        return json_response(b"[]")

    async def sglang_server_info(self, request: web.Request) -> web.Response:
        """SGLang's /get_server_info, the fields a client looks at (its args and version,
        one internal state per DP rank; no acceptance here, loadgen does not read it)."""
        body = {"model_path": self.config.root, "version": "sim", "internal_states": [{}]}
        return json_response(orjson.dumps(body))

    async def atom_server_info(self, request: web.Request) -> web.Response:
        c = self.config
        body = {"model_id": c.model, "served_model_name": c.model, "tp_size": 1, "dp_size": 1}
        return json_response(orjson.dumps(body))

    async def gpu_metrics(self, request: web.Request) -> web.Response:
        """The power model's GPUs as dcgm-exporter shows them (sim/power.py)."""
        return web.Response(
            body=self.engine.power.render().encode(), headers={"Content-Type": CONTENT_TYPE_LATEST}
        )

    async def reset_prefix_cache(self, request: web.Request) -> web.Response:
        """vLLM 0.32's dev endpoint (vllm/entrypoints/serve/dev/cache/api_router.py):
        `{"success": bool}`, false while requests hold blocks. The query's
        reset_running_requests (preempting them first) is accepted but not modelled: the
        answer is false while they run, as without it; reset_external has no connector
        to reach here."""
        try:
            for name in ("reset_running_requests", "reset_external"):
                query_bool(request.query.get(name), name)
        except ApiError as exc:
            return error_response(exc)
        return json_response(orjson.dumps({"success": self.engine.reset_prefix_cache()}))

    async def server_info(self, request: web.Request) -> web.Response:
        """vLLM's dev-mode GET /server_info, of its config only the profiler's part
        (where a client learns the trace directory)."""
        profile = self.engine.profiler
        profiler = {
            "profiler": "torch" if profile else None,
            "torch_profiler_dir": str(profile.directory) if profile else "",
        }
        body = {"vllm_config": {"profiler_config": profiler}, "vllm_env": {}, "system_env": {}}
        return json_response(orjson.dumps(body))

    async def start_profile(self, request: web.Request) -> web.Response:
        assert self.engine.profiler is not None
        raw = await request.read()
        try:
            self.engine.profiler.start(parse_json(raw) if raw.strip() else None)
        except ApiError as exc:
            return error_response(exc)
        return web.Response(status=200)

    async def stop_profile(self, request: web.Request) -> web.Response:
        assert self.engine.profiler is not None
        try:
            self.engine.profiler.stop()
        except OSError as exc:  # vLLM: the export's exception, a 500
            return error_response(
                ApiError(500, f"the trace could not be written: {exc}", "InternalServerError")
            )
        return web.Response(status=200)

    async def tokenize(self, request: web.Request) -> web.Response:
        try:
            body = parse_json(await request.read())
            check_model(body, self.config.model)
            add_special = body.get("add_special_tokens")
            if "messages" in body:
                ids = await self.tokenization.chat_prompt(body, bool(add_special))
            elif isinstance(body.get("prompt"), str):
                special = True if add_special is None else bool(add_special)
                ids = await self.tokenization.encode(body["prompt"], special)
            else:
                raise bad_request(
                    "tokenize needs a string 'prompt' or 'messages'",
                    "prompt",
                    type(body.get("prompt")).__name__,
                )
        except ApiError as exc:
            return error_response(exc)
        return json_response(tokenize_body(ids, self.config.max_model_len))

    async def detokenize(self, request: web.Request) -> web.Response:
        try:
            body = parse_json(await request.read())
            check_model(body, self.config.model)
            tokens = body.get("tokens")
            if not isinstance(tokens, list) or not all(
                isinstance(t, int) and not isinstance(t, bool) for t in tokens
            ):
                raise bad_request("tokens must be a list of token ids", "tokens", tokens)
            check_token_ids(tokens, self.tokenization.vocab_size)
        except ApiError as exc:
            return error_response(exc)
        return json_response(detokenize_body(decode(self.tokenization.tokenizer, tokens)))

    def close(self) -> None:
        if self.trace is not None:
            self.trace.close()
        if self.step_log is not None:
            self.step_log.close()


@contextlib.asynccontextmanager
async def running_simulator(
    config: SimConfig,
    host: str = "127.0.0.1",
    port: int = 0,
    *,
    tokenizer: Tokenizer | None = None,
    registry: CollectorRegistry | None = None,
) -> AsyncIterator[RunningSimulator]:
    """Serve `config` on host:port (0 = a free port) until the block exits."""
    if tokenizer is None:
        tokenizer = await asyncio.to_thread(load_tokenizer, config.tokenizer)
    server = SimServer(config, tokenizer, registry if registry is not None else CollectorRegistry())
    runner = web.AppRunner(server.app, access_log=None, handle_signals=False, shutdown_timeout=1.0)
    await runner.setup()
    engine_tasks: list[asyncio.Task[None]] = []
    try:
        site = web.TCPSite(runner, host, port)
        await site.start()
        bound_port = int(runner.addresses[0][1])
        engine_tasks = [
            asyncio.create_task(engine.run(), name=f"loadgen-sim-engine-{engine.index}")
            for engine in server.engine.engines
        ]
        yield RunningSimulator(
            config=config,
            host=host,
            port=bound_port,
            registry=server.registry,
            power=server.engine.power,
        )
        for task in engine_tasks:
            if task.done():
                task.result()  # an engine crash must not pass silently
    finally:
        server.engine.stop()
        for task in engine_tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await task
        await runner.cleanup()
        server.close()
