"""The one exception every encoder raises for input it cannot encode or parse."""

from __future__ import annotations


class EncodingError(ValueError):
    """Invalid messages or completion text; the message names the message index and the fault.

    A ValueError subclass so that callers validating user input can catch either.
    """
