"""Emptying the servers' prefix caches between points (--reset-prefix-cache).

vLLM 0.32 (vllm/entrypoints/serve/dev/cache/api_router.py): `POST /reset_prefix_cache`,
registered only when the server runs with VLLM_SERVER_DEV_MODE=1 (else 404); boolean
query parameters `reset_running_requests` and `reset_external` (both default false);
the answer is `{"success": bool}`, false while blocks are still held (running requests,
in-flight async KV offload), and callers are told to retry. A 2xx is therefore not a
reset: `success` is read. SGLang: `POST /flush_cache`, 200 once flushed, 400 while
requests run (retried the same way). `reset_running_requests` is never sent: it would
preempt requests, and between points none of loadgen's run.

A router does not pass a reset on, so every server loadgen knows is reset: the target and
each `--server-metrics` URL's server. The calls go through the run's hardened session
(http_session.py): bounded bodies, the `--http-timeout` on each call.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Literal
from urllib.parse import urlsplit, urlunsplit

import aiohttp
import orjson

from loadgen.client.http_session import MAX_JSON_BYTES, read_capped
from loadgen.config.redact import redact_url
from loadgen.config.telemetry import metrics_source
from loadgen.errors import ServerError
from loadgen.results.point import CacheState
from loadgen.wording import reason_of

VLLM_PATH = "/reset_prefix_cache"
SGLANG_PATH = "/flush_cache"
FIRST_RETRY_S = 0.05
MAX_RETRY_S = 1.0

Flavour = Literal["vllm", "sglang"]


class ResetUnavailable(ServerError):
    """A server has no reset endpoint: the run stops before its first point."""


def reset_servers(base_url: str, server_metrics: Sequence[str]) -> tuple[str, ...]:
    """The roots of every server loadgen knows: the target, and each --server-metrics
    URL without its /metrics path; each once."""
    roots = [base_url.rstrip("/")]
    for entry in server_metrics:
        parts = urlsplit(metrics_source(entry)[1])
        path = parts.path.rstrip("/")
        path = path[: -len("/metrics")] if path.endswith("/metrics") else ""
        roots.append(urlunsplit((parts.scheme, parts.netloc, path, "", "")))
    return tuple(dict.fromkeys(roots))


class _Retry(Exception):
    """The server refused the reset for now (blocks held, requests running)."""


class HttpCacheReset:
    """run/cache_control.py's CacheControl over HTTP: which endpoint each server has is
    found once (`check`), then every `reset` empties all of them, concurrently."""

    def __init__(
        self,
        session: aiohttp.ClientSession,
        servers: Sequence[str],
        *,
        timeout_s: float,
        reset_external: bool = False,
        sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.session = session
        self.servers = tuple(servers)
        self.timeout_s = timeout_s
        self.query = {"reset_external": "true"} if reset_external else {}
        self.sleep = sleep
        self.clock = clock
        self.flavours: dict[str, Flavour] = {}

    async def check(self) -> None:
        """Find each server's endpoint (this resets it once, harmlessly, before the
        first point); ResetUnavailable when one answers 404 to both."""
        for server in self.servers:
            self.flavours[server] = await self._flavour(server)

    async def reset(self) -> CacheState:
        """Every server reset, or why not (each failing server's reason)."""
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(self._reset(server)) for server in self.servers]
        reasons = [r for r in (t.result() for t in tasks) if r is not None]
        if reasons:
            return CacheState(cache_state="reset_failed", cache_reset_detail="; ".join(reasons))
        return CacheState(cache_state="reset")

    async def _flavour(self, server: str) -> Flavour:
        where = redact_url(server)
        try:
            async with self.session.post(server + VLLM_PATH, params=self.query) as response:
                if response.status != 404:
                    return "vllm"
            async with self.session.post(server + SGLANG_PATH) as response:
                if response.status != 404:
                    return "sglang"
        except (aiohttp.ClientError, TimeoutError) as exc:
            raise ServerError(
                f"--reset-prefix-cache: cannot reach {where}: {reason_of(exc)}"
            ) from None
        raise ResetUnavailable(
            f"--reset-prefix-cache: {where} answers 404 to POST {VLLM_PATH} (and to "
            f"SGLang's {SGLANG_PATH}): vLLM serves it only when started with "
            "VLLM_SERVER_DEV_MODE=1 in its environment; restart it so, or drop "
            "--reset-prefix-cache"
        )

    async def _reset(self, server: str) -> str | None:
        """None once `server` is reset; else the reason, retried until the deadline
        while the server only refuses for now."""
        flavour = self.flavours.get(server, "vllm")
        deadline = self.clock() + self.timeout_s
        wait = FIRST_RETRY_S
        where = redact_url(server)
        while True:
            try:
                await self._once(server, flavour)
                return None
            except _Retry as refused:
                if self.clock() + wait > deadline:
                    return f"{where}: still refused after {self.timeout_s:g} s ({refused})"
            except (aiohttp.ClientError, TimeoutError, ValueError) as exc:
                return f"{where}: {reason_of(exc)}"
            await self.sleep(wait)
            wait = min(wait * 2, MAX_RETRY_S)

    async def _once(self, server: str, flavour: Flavour) -> None:
        if flavour == "sglang":
            async with self.session.post(server + SGLANG_PATH) as response:
                if response.status == 400:  # requests are running
                    raise _Retry(f"{SGLANG_PATH} answered 400: requests still running")
                if response.status != 200:
                    raise ValueError(f"POST {SGLANG_PATH} answered HTTP {response.status}")
                return
        async with self.session.post(server + VLLM_PATH, params=self.query) as response:
            if response.status != 200:
                raise ValueError(f"POST {VLLM_PATH} answered HTTP {response.status}")
            body = orjson.loads(await read_capped(response, MAX_JSON_BYTES))
        success = body.get("success") if isinstance(body, dict) else None
        if success is False:
            raise _Retry("success: false, blocks still held by requests or KV transfers")
        if success is not True:
            raise ValueError(f"POST {VLLM_PATH} answered {str(body)[:80]!r}, no success field")
