"""The lines loadgen prints: counts ("1 warning", "2 warnings"), and text from outside
(a server, a file) made safe to show on a terminal."""

from __future__ import annotations

import re


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun in the number it needs (plural: when adding "s" is wrong)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"


# An ANSI escape sequence (CSI ... final byte, OSC ... BEL/ST, or ESC and one byte), then
# any other control character (C0, DEL, C1) or a bidirectional override.
_ESCAPE = re.compile(
    r"\x1b\[[0-?]*[ -/]*[@-~]?|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?|\x1b[@-_]?"
    r"|[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]"
)


def printable(text: str, limit: int | None = None) -> str:
    """Text from a server or a file (a model name, an error body) made safe to show on a
    terminal: escape sequences and control characters removed, newlines and tabs kept;
    cut to `limit` characters with `…` when given."""
    shown = _ESCAPE.sub("", text)
    if limit is not None and len(shown) > limit:
        shown = shown[: max(0, limit - 1)] + "…"
    return shown


_LINE_BREAKS = str.maketrans({"\n": "\\n", "\r": "\\r", "\t": "\\t"})


def one_line(text: str, limit: int | None = None) -> str:
    """Text from outside that stands inside a line of ours (a directory a server names):
    `printable`, and its line breaks shown as `\\n`, so it cannot start a line of its own."""
    return printable(text.translate(_LINE_BREAKS), limit)


def reason_of(exc: BaseException) -> str:
    """Why an operation failed, never empty: the exception's text, else its type (a
    timeout's text is often empty)."""
    return str(exc) or type(exc).__name__
