"""Redirects are followed within the server's origin only.

aiohttp follows redirects anywhere and re-sends the session's headers: it drops
`Authorization` on a cross-origin hop but not `X-Api-Key` or any other `--header`
secret. A server (or a proxy in front of it) that answers /v1/models with a redirect to
another scheme, host or port would receive them. Every hop is checked against the one
before it, so a chain of redirects never leaves the origin loadgen was pointed at.
"""

from __future__ import annotations

import aiohttp
from yarl import URL

from loadgen.config.redact import redact_text

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})


class CrossOriginRedirect(aiohttp.ClientError):
    """A redirect to another origin, refused before anything was sent there. A
    ClientError, so a call that may fail (a mid-run scrape) fails the usual way."""

    def __init__(self, source: URL, target: URL) -> None:
        super().__init__(
            f"the server redirected {source.path} to {redact_text(str(target))}: loadgen "
            "does not follow redirects to another origin; point --base-url at the server "
            "itself"
        )


def _origin(url: URL) -> tuple[str, str | None, int | None]:
    return url.scheme, url.host, url.port  # yarl gives the scheme's default port


async def same_origin_redirects(
    request: aiohttp.ClientRequest, handler: aiohttp.ClientHandlerType
) -> aiohttp.ClientResponse:
    """A client middleware (aiohttp runs it for every hop of a redirect chain)."""
    response = await handler(request)
    location = response.headers.get("Location")
    if response.status not in REDIRECT_STATUSES or not location:
        return response
    try:
        target = request.url.join(URL(location))
    except ValueError:
        return response  # aiohttp refuses a Location that is not a URL itself
    if _origin(target) != _origin(request.url):
        response.release()
        raise CrossOriginRedirect(request.url, target)
    return response
