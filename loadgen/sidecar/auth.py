"""Bearer-token check for the sidecar's /v1/* endpoints.

Works on the header's raw bytes (`request.raw_headers`): aiohttp decodes header values
as UTF-8 with surrogateescape, so a value with undecodable bytes (`\\xff\\xfe`) is a str
that cannot be encoded again. Anything that is not exactly one `Authorization: Bearer
<token>` in visible ASCII is a 401, never a 500.
"""

from __future__ import annotations

import hmac
import re
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from aiohttp import web

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]
# RFC 6750 b64token is narrower; any visible ASCII character is accepted so tokens from
# `openssl rand -base64` and friends work, but nothing that could not travel in a header.
_TOKEN = re.compile(rb"[\x21-\x7e]+")


def token_problem(token: str) -> str | None:
    """Why `token` cannot be used as the API token (None: it can)."""
    if not _TOKEN.fullmatch(token.encode("utf-8", "surrogateescape")):
        return (
            "must be visible ASCII without spaces or newlines (clients cannot send "
            "anything else in a header), e.g. `openssl rand -hex 16`"
        )
    return None


def bearer_credential(raw_headers: tuple[tuple[bytes, bytes], ...]) -> bytes | str:
    """The token bytes of the one `Authorization: Bearer <token>` header, or why not."""
    values = [value for name, value in raw_headers if name.lower() == b"authorization"]
    if not values:
        return "missing bearer token"
    if len(values) > 1:
        return "more than one Authorization header"
    scheme, _, credential = values[0].strip(b" \t").partition(b" ")
    credential = credential.strip(b" \t")
    if scheme.lower() != b"bearer" or not _TOKEN.fullmatch(credential):
        return "Authorization must be `Bearer <token>`, the token in visible ASCII"
    return credential


def _unauthorized(message: str) -> web.Response:
    response = web.Response(
        body=orjson.dumps({"error": message}), status=401, content_type="application/json"
    )
    response.headers["WWW-Authenticate"] = 'Bearer realm="loadgen"'
    return response


def auth_middleware(token: str | None) -> Any:
    """/v1/* needs the bearer token when one is set; other paths stay open."""
    expected = token.encode() if token else None

    @web.middleware
    async def check(request: web.Request, handler: Handler) -> web.StreamResponse:
        if expected is not None and request.path.startswith("/v1/"):
            credential = bearer_credential(request.raw_headers)
            if isinstance(credential, str):
                return _unauthorized(credential)
            # compare_digest: the time taken does not reveal how much of the token matched.
            if not hmac.compare_digest(credential, expected):
                return _unauthorized("wrong bearer token")
        return await handler(request)

    return check
