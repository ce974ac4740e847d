"""The one aiohttp exception loadgen defines, in aiohttp's public API only."""

from __future__ import annotations

import aiohttp


class MalformedBody(aiohttp.ClientPayloadError):
    """The response body's HTTP framing is invalid (not a truncation: a lie)."""
