"""Counts in the lines loadgen prints: "1 warning", "2 warnings"."""

from __future__ import annotations


def counted(n: int, noun: str, plural: str | None = None) -> str:
    """`n` and the noun in the number it needs (plural: when adding "s" is wrong)."""
    return f"{n} {noun if n == 1 else plural or noun + 's'}"
