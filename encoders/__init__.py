"""Prompt encoders: chat messages -> the exact prompt text a model was trained on.

`ENCODERS` maps the names accepted by `--encoder` to encoder objects; the load engine picks
one by name and never needs to know which template it applies.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, Protocol

from encoders.deepseek_v4 import DeepSeekV4Encoder
from encoders.errors import EncodingError
from encoders.raw import RawEncoder

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


ENCODERS: dict[str, Encoder] = {
    "dsv4": DeepSeekV4Encoder(),
    "raw": RawEncoder(),
}


def get_encoder(name: str) -> Encoder:
    """The registered encoder `name`, or a ValueError that lists the valid names."""
    try:
        return ENCODERS[name]
    except KeyError:
        raise ValueError(
            f"unknown encoder {name!r}; choose one of {', '.join(sorted(ENCODERS))}"
        ) from None
