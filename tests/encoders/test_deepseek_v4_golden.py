"""DeepSeek's own golden files: every output byte for byte, every assistant turn parsed back."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

from encoders.deepseek_v4 import encode_messages, parse_message_from_completion_text

CASES = [(1, "thinking"), (2, "thinking"), (3, "thinking"), (4, "chat")]
ASSISTANT_TURN = re.compile(
    r"<｜Assistant｜>(<think>|</think>)(.*?<｜end▁of▁sentence｜>)", re.DOTALL
)


def load_case(fixtures: Path, number: int) -> tuple[list[dict[str, Any]], str]:
    data = json.loads((fixtures / f"test_input_{number}.json").read_text(encoding="utf-8"))
    if isinstance(data, dict):  # {"tools", "messages"}: the tools belong to messages[0]
        messages = data["messages"]
        messages[0] = {**messages[0], "tools": data["tools"]}
    else:
        messages = data
    expected = (fixtures / f"test_output_{number}.txt").read_text(encoding="utf-8")
    return messages, expected


@pytest.mark.parametrize(("number", "mode"), CASES)
def test_golden_output_is_reproduced_exactly(dsv4_fixtures: Path, number: int, mode: str) -> None:
    messages, expected = load_case(dsv4_fixtures, number)
    assert encode_messages(messages, mode) == expected


def assistant_turns(prompt: str) -> list[tuple[str, str]]:
    """(mode to parse with, completion text) for every assistant turn in a prompt."""
    return [
        ("thinking" if opener == "<think>" else "chat", text)
        for opener, text in ASSISTANT_TURN.findall(prompt)
    ]


def arguments_of(message: dict[str, Any]) -> list[tuple[str, Any]]:
    calls = message.get("tool_calls") or []
    return [(c["function"]["name"], json.loads(c["function"]["arguments"])) for c in calls]


@pytest.mark.parametrize(("number", "mode"), CASES)
def test_every_golden_assistant_turn_parses_back(
    dsv4_fixtures: Path, number: int, mode: str
) -> None:
    messages, expected = load_case(dsv4_fixtures, number)
    originals = [m for m in messages if m["role"] == "assistant"]
    turns = assistant_turns(expected)
    assert len(turns) == len(originals)
    parsed_messages = []
    for (parse_mode, text), original in zip(turns, originals, strict=True):
        parsed = parse_message_from_completion_text(text, parse_mode)
        assert parsed["role"] == "assistant"
        assert parsed["content"] == (original.get("content") or "")
        if parse_mode == "thinking":
            assert parsed["reasoning_content"] == original.get("reasoning_content")
        else:  # a dropped (or chat-mode) turn carries no reasoning
            assert parsed["reasoning_content"] is None
        assert arguments_of(parsed) == arguments_of(original)
        parsed_messages.append(parsed)
    # Putting the parsed turns back in place must give the very same prompt.
    replaced = iter(parsed_messages)
    rebuilt = [
        {**next(replaced), **({"mask": m["mask"]} if "mask" in m else {})}
        if m["role"] == "assistant"
        else m
        for m in messages
    ]
    assert encode_messages(rebuilt, mode) == expected


def test_golden_arguments_text_is_reproduced(dsv4_fixtures: Path) -> None:
    messages, expected = load_case(dsv4_fixtures, 1)
    _, text = assistant_turns(expected)[0]
    parsed = parse_message_from_completion_text(text, "thinking")
    original = messages[2]["tool_calls"][0]["function"]
    assert parsed["tool_calls"] == [
        {
            "type": "function",
            "function": {"name": "get_weather", "arguments": original["arguments"]},
        }
    ]
