"""The one aiohttp client setup for every connection loadgen opens that is not a measured
stream: the server's preflight and /metrics scrapes, `--server-metrics`, GPU exporters,
model lookups, the sidecar's readiness probe, the embedded simulator's health poll.

Whatever answers there is treated as untrusted (an exporter or a proxy is not the
instrument), so every session and every body read here is bounded:

- `Accept-Encoding: identity` and no automatic decompression: an answer that is
  compressed anyway is refused (CompressedBody), never inflated (a 10 MB gzip answer
  would inflate to gigabytes in this process);
- redirects are followed within the origin only (redirects.py);
- a body is read with a cap (`read_capped`): BodyTooLarge past it, so an endless or
  huge answer costs at most the cap in memory;
- a total timeout on every call (the session's default).

The measured streams use the native client (client/native/), never this.
"""

from __future__ import annotations

from collections.abc import Mapping

import aiohttp

from loadgen.client.deadlines import http_timeout
from loadgen.client.redirects import CrossOriginRedirect, same_origin_redirects
from loadgen.config.redact import redact_url
from loadgen.config.spec import DEFAULT_HTTP_TIMEOUT_S

# A vLLM /metrics page is 0.1-2 MB, a dcgm-exporter page ~60 KB per node: anything past
# this is not a metrics page, and reading it would cost the process that much memory.
MAX_PAGE_BYTES = 16 << 20
# /v1/models, /version, /tokenize: a few KB (a model list of thousands of adapters fits).
MAX_JSON_BYTES = 1 << 20
READ_BLOCK = 64 << 10
IDENTITY = frozenset({"", "identity"})


class BodyTooLarge(aiohttp.ClientError):
    """An answer longer than loadgen reads from that URL (a ClientError: a mid-run
    scrape fails the usual way)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            f"the answer is over {limit / (1 << 20):g} MiB, more than loadgen reads from "
            "it: is the URL right?"
        )


class CompressedBody(aiohttp.ClientError):
    """An answer compressed although loadgen asked for identity: refused, not inflated."""

    def __init__(self, encoding: str) -> None:
        super().__init__(
            f"the answer is compressed (Content-Encoding {encoding[:40]!r}) although loadgen "
            "asks for identity, and loadgen does not decompress answers: turn compression "
            "off there"
        )


# What a preflight stops on with its own line (refused_line), rather than "cannot reach".
REFUSED: tuple[type[aiohttp.ClientError], ...] = (CrossOriginRedirect, BodyTooLarge, CompressedBody)


def refused_line(url: str, exc: aiohttp.ClientError) -> str:
    """The one line for a REFUSED answer (a redirect's names its own path)."""
    return str(exc) if isinstance(exc, CrossOriginRedirect) else f"GET {redact_url(url)}: {exc}"


def open_session(
    *,
    timeout_s: float = DEFAULT_HTTP_TIMEOUT_S,
    max_connections: int = 100,
    headers: Mapping[str, str] | None = None,
    force_close: bool = False,
) -> aiohttp.ClientSession:
    """A session bounded as the module doc says (aiohttp's public API only), its
    `timeout_s` bounding every call. `force_close`: a connection per request."""
    connector = aiohttp.TCPConnector(
        limit=max_connections,
        limit_per_host=0,
        keepalive_timeout=None if force_close else 3600.0,
        force_close=force_close,
        ttl_dns_cache=None,
    )
    return aiohttp.ClientSession(
        connector=connector,
        timeout=http_timeout(timeout_s),
        headers={"Accept-Encoding": "identity", **(headers or {})},
        auto_decompress=False,
        skip_auto_headers=("User-Agent",),
        # the session's headers (--header secrets) never follow a redirect elsewhere
        middlewares=(same_origin_redirects,),
    )


async def read_capped(response: aiohttp.ClientResponse, limit: int) -> bytes:
    """The whole body of `response`, at most `limit` bytes (BodyTooLarge past it; the
    connection is then closed with the response, the rest never read)."""
    encoding = response.headers.get("Content-Encoding", "").strip().lower()
    if encoding not in IDENTITY:
        raise CompressedBody(encoding)
    if response.content_length is not None and response.content_length > limit:
        raise BodyTooLarge(limit)
    body = bytearray()
    async for block in response.content.iter_chunked(READ_BLOCK):
        body += block
        if len(body) > limit:
            raise BodyTooLarge(limit)
    return bytes(body)
