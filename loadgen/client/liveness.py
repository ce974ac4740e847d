"""Does the server answer at all? One GET on a connection of its own.

Used only while the server is suspected gone (run/server_watch.py). Any HTTP status is
an answer: a 404 or 401 proves the server is up as much as a 200. The probe never goes
through the run's session, whose connections may all be taken by stuck requests.
"""

from __future__ import annotations

import aiohttp

from loadgen.client.http_session import open_session

PROBE_PATH = "/health"  # vLLM's; other servers answer 404, which counts as an answer


async def answers_http(base_url: str, timeout_s: float) -> bool:
    """True when an HTTP response (any status) arrives within `timeout_s`."""
    try:
        async with (
            open_session(timeout_s=timeout_s, max_connections=1, force_close=True) as session,
            session.get(base_url + PROBE_PATH, allow_redirects=False) as response,
        ):
            return response.status > 0
    except (aiohttp.ClientError, OSError, TimeoutError):
        return False
