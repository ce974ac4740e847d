"""Prompt encoders: chat messages -> the exact prompt text a model was trained on.

`ENCODERS` maps the names accepted by `--encoder` to encoder objects; the load engine picks
one by name and never needs to know which template it applies.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from encoders import deepseek_v4, raw
from encoders.errors import EncodingError

__all__ = ["ENCODERS", "Encoder", "EncodingError", "get_encoder"]


class Encoder(Protocol):
    """Turns chat messages into prompt text. Raises EncodingError for invalid input."""

    @property
    def name(self) -> str: ...

    def encode_messages(
        self,
        messages: Sequence[Mapping[str, Any]],
        thinking_mode: str,
        *,
        reasoning_effort: str | None = None,
    ) -> str:
        """The whole prompt (BOS and template included) for `messages`."""
        ...

    def wrap_user(
        self, content: str, thinking_mode: str, *, reasoning_effort: str | None = None
    ) -> tuple[str, str]:
        """(prefix, suffix) such that prefix + content + suffix equals
        encode_messages([{"role": "user", "content": content}], ...)."""
        ...


@dataclass(frozen=True, slots=True)
class _ModuleEncoder:
    """An `Encoder` made of a module's two functions of the same names."""

    name: str
    encode_messages: Callable[..., str]
    wrap_user: Callable[..., tuple[str, str]]


ENCODERS: dict[str, Encoder] = {
    "dsv4": _ModuleEncoder("dsv4", deepseek_v4.encode_messages, deepseek_v4.wrap_user),
    "raw": _ModuleEncoder("raw", raw.encode_messages, raw.wrap_user),
}


def get_encoder(name: str) -> Encoder:
    """The registered encoder `name`, or a ValueError that lists the valid names."""
    try:
        return ENCODERS[name]
    except KeyError:
        raise ValueError(
            f"unknown encoder {name!r}; choose one of {', '.join(sorted(ENCODERS))}"
        ) from None
