"""The raw encoder: no template. The prompt is the message text itself.

For models or servers whose template loadgen should not reproduce (or for measuring a bare
completion endpoint). A single user message encodes to exactly its content; several
messages encode to their contents joined by a blank line ("\n\n"), whatever their roles,
skipping empty or missing contents (reasoning and tool calls are not rendered).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from encoders.deepseek_v4 import check_thinking_mode, reasoning_effort_prefix
from encoders.errors import EncodingError

MESSAGE_SEPARATOR = "\n\n"


def encode_messages(
    messages: Sequence[Mapping[str, Any]],
    thinking_mode: str,
    *,
    reasoning_effort: str | None = None,
) -> str:
    # Mode and effort change nothing here, but a typo should fail the same way for every
    # encoder rather than be silently ignored.
    check_thinking_mode(thinking_mode)
    reasoning_effort_prefix(reasoning_effort, thinking=False)
    contents = []
    for index, message in enumerate(messages):
        if not isinstance(message, Mapping):
            raise EncodingError(f"message {index}: must be an object, got {type(message).__name__}")
        content = message.get("content")
        if content is not None and not isinstance(content, str):
            raise EncodingError(f"message {index}: content must be a string or null")
        if content:
            contents.append(content)
    return MESSAGE_SEPARATOR.join(contents)


def wrap_user(
    content: str, thinking_mode: str, *, reasoning_effort: str | None = None
) -> tuple[str, str]:
    check_thinking_mode(thinking_mode)
    reasoning_effort_prefix(reasoning_effort, thinking=False)
    if not isinstance(content, str):
        raise EncodingError(f"message 0: content must be a string, got {type(content).__name__}")
    return "", ""
