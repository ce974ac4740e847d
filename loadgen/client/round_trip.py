"""The shard's round trip to the server, measured once at preflight (never per chunk).

A few GETs of /v1/models on the connection preflight has already opened (its first GET
paid the connect): the median of their request-to-body times. It is what each shard of
a run adds to every TTFT it measures, so `loadgen merge` keeps it per shard and warns
when the shards' differ (scale/shard_views.py).
"""

from __future__ import annotations

import statistics
import time

import aiohttp

from loadgen.client.http_session import MAX_JSON_BYTES, read_capped

RTT_PROBES = 3


async def round_trip_ms(session: aiohttp.ClientSession, url: str) -> float | None:
    """The median of RTT_PROBES timed GETs of `url` in ms; None when one fails (a round
    trip not measured is unknown, never a guess)."""
    samples: list[float] = []
    for _ in range(RTT_PROBES):
        start = time.perf_counter_ns()
        try:
            async with session.get(url) as response:
                await read_capped(response, MAX_JSON_BYTES)
        except (TimeoutError, aiohttp.ClientError, OSError):
            return None
        samples.append((time.perf_counter_ns() - start) / 1e6)
    return round(statistics.median(samples), 3)
