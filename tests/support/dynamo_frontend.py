"""A stand-in for a Dynamo frontend in front of one worker: it relays the OpenAI routes to
the worker and exports `dynamo_frontend_*` series on /metrics, observed as Dynamo's own
frontend observes them (ai-dynamo/dynamo lib/llm/src/http/service/metrics.rs at
79a21ca4f5200e76a2bcc19580eb6176298c7e59: TTFT from the handler's start to the first
token-bearing response; each later response's gap divided by its tokens, observed once
per token; the request's duration at its end; requests_total by status). Dynamo itself
needs its Rust build and NATS/etcd, which this machine does not have."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import orjson
from aiohttp import web
from prometheus_client import CollectorRegistry, Counter, Histogram, generate_latest

BUCKETS = (0.001, 0.005, 0.01, 0.05, 0.1, 0.5, 1.0, 5.0, 30.0, 480.0)


@dataclass
class Frontend:
    port: int

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _tokens(payload: bytes) -> int:
    """Tokens in one SSE event of a completion stream (its token_ids, else one per text)."""
    if not payload.startswith(b"data: ") or payload.startswith(b"data: [DONE]"):
        return 0
    event = orjson.loads(payload[len(b"data: ") :])
    choices = event.get("choices") or []
    if not choices:
        return 0
    ids = choices[0].get("token_ids")
    if ids is not None:
        return len(ids)
    return 1 if choices[0].get("text") else 0


@contextlib.asynccontextmanager
async def dynamo_frontend(worker_url: str) -> AsyncIterator[Frontend]:
    registry = CollectorRegistry()
    prefix = "dynamo_frontend_"
    requests = Counter(
        prefix + "requests",
        "Total number of LLM requests processed",
        ("model", "endpoint", "request_type", "status"),
        registry=registry,
    )
    ttft = Histogram(
        prefix + "time_to_first_token_seconds",
        "Time to first token in seconds",
        ("model",),
        buckets=BUCKETS,
        registry=registry,
    )
    itl = Histogram(
        prefix + "inter_token_latency_seconds",
        "Inter-token latency in seconds",
        ("model",),
        buckets=BUCKETS,
        registry=registry,
    )
    duration = Histogram(
        prefix + "request_duration_seconds",
        "Duration of LLM requests",
        ("model",),
        buckets=BUCKETS,
        registry=registry,
    )

    async def metrics(_request: web.Request) -> web.Response:
        return web.Response(body=generate_latest(registry), content_type="text/plain")

    async def relay(request: web.Request) -> web.StreamResponse:
        start = time.perf_counter()
        body = await request.read()
        url = worker_url + request.path_qs
        async with session.request(request.method, url, data=body or None) as upstream:
            if request.path not in ("/v1/completions", "/v1/chat/completions"):
                return web.Response(
                    body=await upstream.read(),
                    status=upstream.status,
                    content_type=upstream.content_type,
                )
            model = (orjson.loads(body) or {}).get("model", "")
            response = web.StreamResponse(status=upstream.status)
            response.content_type = upstream.content_type
            await response.prepare(request)
            first, last = True, 0.0
            # each stamp is taken before the line is handed to the client, so the
            # frontend's spans end before the client can have read them (Dynamo observes
            # them as it produces the responses, not as the socket drains)
            end = time.perf_counter()
            async for line in upstream.content:  # SSE lines, each event's data line whole
                tokens = _tokens(line.rstrip(b"\n")) if upstream.status == 200 else 0
                end = time.perf_counter()
                await response.write(line)
                if not tokens:
                    continue
                now = end - start
                if first:
                    first = False
                    ttft.labels(model).observe(now)
                else:
                    for _ in range(tokens):
                        itl.labels(model).observe((now - last) / tokens)
                last = now
            await response.write_eof()
        status = "success" if upstream.status == 200 else "error"
        endpoint = "completions" if request.path == "/v1/completions" else "chat_completions"
        requests.labels(model, endpoint, "stream", status).inc()
        duration.labels(model).observe(end - start)
        return response

    app = web.Application()
    app.router.add_get("/metrics", metrics)
    app.router.add_route("*", "/{tail:.*}", relay)
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as session:
        runner = web.AppRunner(app)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        port = site._server.sockets[0].getsockname()[1]  # type: ignore[union-attr]
        try:
            yield Frontend(port)
        finally:
            await runner.cleanup()
