"""Helpers shared by the simulator tests (imported as a plain module: tests/sim is on sys.path)."""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import orjson

from loadgen.sim.server import RunningSimulator

SimFactory = Callable[..., AbstractAsyncContextManager[RunningSimulator]]


def sse_events(raw: bytes) -> list[Any]:
    """Each `data:` payload, JSON-decoded ("[DONE]" stays a string)."""
    events: list[Any] = []
    for block in raw.split(b"\n\n"):
        if not block.strip():
            continue
        assert block.startswith(b"data: "), block
        payload = block[len(b"data: ") :]
        events.append("[DONE]" if payload == b"[DONE]" else orjson.loads(payload))
    return events


async def post_stream(
    session: Any, url: str, body: dict[str, Any], headers: dict[str, str] | None = None
) -> list[Any]:
    """POST a streaming request and return its decoded events."""
    async with session.post(url, json={**body, "stream": True}, headers=headers) as response:
        assert response.status == 200, await response.text()
        return sse_events(await response.read())


def chunk_token_ids(events: list[Any]) -> list[list[int]]:
    """token_ids of every event that carries generated tokens (return_token_ids)."""
    chunks = []
    for event in events:
        if event == "[DONE]" or not event["choices"]:
            continue
        ids = event["choices"][0].get("token_ids")
        if ids:
            chunks.append(ids)
    return chunks


def final_usage(events: list[Any]) -> dict[str, Any]:
    usage: dict[str, Any] = events[-2]["usage"]
    return usage


def parse_metrics(text: str) -> dict[str, float]:
    """'name{labels}' -> value for every sample line."""
    samples = {}
    for line in text.splitlines():
        if line and not line.startswith("#"):
            series, value = line.rsplit(" ", 1)
            samples[series] = float(value)
    return samples


def metric(samples: dict[str, float], name: str, **labels: str) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    total = 0.0
    for series, value in samples.items():
        base, _, rest = series.partition("{")
        if base == name and all(f'{k}="{v}"' in rest for k, v in labels.items()):
            total += value
    return total


async def fetch(
    method: str,
    url: str,
    *,
    json: Any = None,
    data: bytes | None = None,
    headers: dict[str, str] | None = None,
) -> tuple[int, dict[str, str], bytes]:
    """One request on a fresh session: (status, headers, body)."""
    import aiohttp

    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, json=json, data=data, headers=headers) as response,
    ):
        return response.status, dict(response.headers), await response.read()
