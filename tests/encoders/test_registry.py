"""The ENCODERS registry, the Encoder protocol, and the raw (template-free) encoder."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

import encoders
from encoders import ENCODERS, Encoder, EncodingError, deepseek_v4, get_encoder, raw


def test_registry_has_both_encoders_under_their_names() -> None:
    assert set(ENCODERS) == {"dsv4", "raw"}
    for name, encoder in ENCODERS.items():
        assert encoder.name == name
        assert get_encoder(name) is encoder


def test_unknown_encoder_lists_the_choices() -> None:
    with pytest.raises(ValueError, match=r"unknown encoder 'llama3'; choose one of dsv4, raw"):
        get_encoder("llama3")


def test_registry_dsv4_is_the_module_encoder() -> None:
    messages = [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}]
    for mode in ("chat", "thinking"):
        for effort in (None, "high"):
            assert ENCODERS["dsv4"].encode_messages(
                messages, mode, reasoning_effort=effort
            ) == deepseek_v4.encode_messages(messages, mode, reasoning_effort=effort)


def test_encoders_satisfy_the_protocol() -> None:
    def prompt_of(encoder: Encoder, content: str) -> str:
        prefix, suffix = encoder.wrap_user(content, "thinking", reasoning_effort="max")
        return prefix + content + suffix

    for encoder in ENCODERS.values():
        user = [{"role": "user", "content": "héllo"}]
        expected = encoder.encode_messages(user, "thinking", reasoning_effort="max")
        assert prompt_of(encoder, "héllo") == expected
    assert encoders.EncodingError is EncodingError is deepseek_v4.EncodingError


def test_raw_single_user_message_is_its_content() -> None:
    content = "  leading spaces, <｜User｜> stays text\n"
    assert raw.encode_messages([{"role": "user", "content": content}], "chat") == content
    assert raw.wrap_user(content, "thinking", reasoning_effort="high") == ("", "")


def test_raw_joins_contents_with_a_blank_line() -> None:
    messages: list[dict[str, Any]] = [
        {"role": "system", "content": "sys"},
        {"role": "user", "content": "a"},
        {"role": "assistant", "content": None, "tool_calls": [{"function": {"name": "f"}}]},
        {"role": "assistant", "content": "", "reasoning_content": "ignored"},
        {"role": "user", "content": "b"},
    ]
    assert raw.encode_messages(messages, "thinking") == "sys\n\na\n\nb"
    assert raw.encode_messages([], "chat") == ""


@pytest.mark.parametrize(
    ("call", "pattern"),
    [
        (lambda: raw.encode_messages([{"role": "user", "content": 5}], "chat"), "message 0"),
        (lambda: raw.encode_messages(["text"], "chat"), "message 0: must be an object"),  # type: ignore[list-item]
        (lambda: raw.encode_messages([], "fast"), "thinking_mode"),
        (lambda: raw.encode_messages([], "chat", reasoning_effort="huge"), "reasoning_effort"),
        (lambda: raw.wrap_user("x", "fast"), "thinking_mode"),
    ],
)
def test_raw_rejects_what_dsv4_rejects(call: Callable[[], object], pattern: str) -> None:
    with pytest.raises(EncodingError, match=pattern):
        call()
