"""Completion text -> assistant message, and encode -> parse round trips (hypothesis)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from encoders.deepseek_v4 import (
    EOS,
    TASK_TOKENS,
    EncodingError,
    encode_messages,
    parse_message_from_completion_text,
)

CALL_OPEN = "<｜DSML｜tool_calls>"
CALL_CLOSE = "</｜DSML｜tool_calls>"


def invoke(name: str, *params: str) -> str:
    return (
        f'<｜DSML｜invoke name="{name}">\n'
        + "".join(p + "\n" for p in params)
        + ("</｜DSML｜invoke>")
    )


def param(name: str, value: str, string: bool) -> str:
    flag = "true" if string else "false"
    return f'<｜DSML｜parameter name="{name}" string="{flag}">{value}</｜DSML｜parameter>'


def completion(*invokes: str, content: str = "", reasoning: str | None = "r") -> str:
    head = "" if reasoning is None else reasoning + "</think>"
    block = f"\n\n{CALL_OPEN}\n" + "\n".join(invokes) + f"\n{CALL_CLOSE}" if invokes else ""
    return head + content + block + EOS


def test_plain_answers() -> None:
    assert parse_message_from_completion_text(f"why</think>Because.{EOS}", "thinking") == {
        "role": "assistant",
        "content": "Because.",
        "reasoning_content": "why",
        "tool_calls": [],
    }
    chat = parse_message_from_completion_text(f"Because.{EOS}", "chat")
    assert chat["content"] == "Because." and chat["reasoning_content"] is None


def test_non_string_arguments_keep_their_types() -> None:
    text = completion(
        invoke(
            "book",
            param("city", "Zürich  spaced\nline", True),
            param("nights", "3", False),
            param("price", "99.5", False),
            param("late", "false", False),
            param("guests", '["a", {"b": null}]', False),
            param("meta", '{"k": [1, 2]}', False),
            param("quoted", "42", True),  # a string that looks like a number stays a string
        ),
        invoke("noop"),
    )
    message = parse_message_from_completion_text(text, "thinking")
    calls = message["tool_calls"]
    assert [c["type"] for c in calls] == ["function", "function"]
    assert [c["function"]["name"] for c in calls] == ["book", "noop"]
    assert json.loads(calls[0]["function"]["arguments"]) == {
        "city": "Zürich  spaced\nline",
        "nights": 3,
        "price": 99.5,
        "late": False,
        "guests": ["a", {"b": None}],
        "meta": {"k": [1, 2]},
        "quoted": "42",
    }
    assert json.loads(calls[1]["function"]["arguments"]) == {}
    assert "Zürich" in calls[0]["function"]["arguments"]  # ensure_ascii=False


def test_content_before_tool_calls() -> None:
    text = completion(invoke("f", param("x", "1", False)), content="Let me check.\n\n")
    message = parse_message_from_completion_text(text, "thinking")
    assert message["content"] == "Let me check.\n\n"
    assert message["reasoning_content"] == "r"


def test_leading_task_token_is_skipped() -> None:
    for token in TASK_TOKENS.values():
        message = parse_message_from_completion_text(f"{token}Search{EOS}", "chat")
        assert message["content"] == "Search"


def test_text_cut_short_parses_as_far_as_it_goes() -> None:
    thinking = parse_message_from_completion_text("still thinking about", "thinking")
    assert thinking["reasoning_content"] == "still thinking about" and thinking["content"] == ""
    answer = parse_message_from_completion_text("r</think>half an ans", "thinking")
    assert answer["content"] == "half an ans"


@pytest.mark.parametrize(
    ("text", "pattern"),
    [
        (f"no close{EOS}", "reasoning is never closed"),
        (f"r</think>a{EOS}more", "text follows"),
        (completion(invoke("f", param("x", "{bad", False))), "not JSON"),
        (f"r</think>{CALL_OPEN}\n<｜DSML｜invoke name=\"f\">\n{EOS}", "malformed DSML"),
        (f"r</think>{CALL_OPEN}\n<｜DSML｜invoke name=\"f\">\n"
         f'<｜DSML｜parameter name="x" string="true">v', "never closed"),
        (f"r</think>{CALL_OPEN}\n<｜DSML｜call>\n{CALL_CLOSE}{EOS}", "expected an invoke"),
        (completion(invoke("f", param("x", "1", True), param("x", "2", True))), "given twice"),
        (f'r</think>{CALL_OPEN}\n<｜DSML｜invoke name="f">\n'
         f'<｜DSML｜parameter name="x" string="maybe">1</｜DSML｜parameter>\n', "malformed DSML"),
        (completion(invoke("f")).replace(EOS, "trailing" + EOS), "unexpected text after"),
    ],
)  # fmt: skip
def test_malformed_completions_raise_encoding_error(text: str, pattern: str) -> None:
    with pytest.raises(EncodingError, match=pattern):
        parse_message_from_completion_text(text, "thinking")


def test_unknown_mode_is_refused() -> None:
    with pytest.raises(EncodingError, match="thinking_mode"):
        parse_message_from_completion_text("x", "both")


# --- round trip: whatever the encoder writes, the parser reads back -----------------------

MARKERS = ("</think>", "<｜DSML｜", "</｜DSML｜", EOS, *TASK_TOKENS.values())
safe_text = st.text(max_size=40).filter(lambda s: not any(m in s for m in MARKERS))
names = st.from_regex(r"[A-Za-z_][A-Za-z0-9_.-]{0,15}", fullmatch=True)
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | safe_text,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(safe_text, inner, max_size=3),
    max_leaves=8,
)
tool_calls = st.lists(
    st.builds(
        lambda name, args: {"type": "function", "function": {"name": name, "arguments": args}},
        names,
        st.dictionaries(names, json_values, max_size=4),
    ),
    max_size=3,
)


@settings(max_examples=150, deadline=None)
@given(
    content=safe_text,
    reasoning=safe_text,
    calls=tool_calls,
    mode=st.sampled_from(["chat", "thinking"]),
)
def test_property_encode_then_parse_is_identity(
    content: str, reasoning: str, calls: list[dict[str, Any]], mode: str
) -> None:
    message: dict[str, Any] = {
        "role": "assistant",
        "content": content,
        "reasoning_content": reasoning,
    }
    message["tool_calls"] = [
        {
            "type": c["type"],
            "function": {**c["function"], "arguments": json.dumps(c["function"]["arguments"])},
        }
        for c in calls
    ]
    question = [{"role": "user", "content": "q"}]
    text = encode_messages([message], mode, context=question)
    parsed = parse_message_from_completion_text(text, mode)
    assert parsed["content"] == content
    assert parsed["reasoning_content"] == (reasoning if mode == "thinking" else None)
    assert [
        (c["function"]["name"], json.loads(c["function"]["arguments"]))
        for c in parsed["tool_calls"]
    ] == [(c["function"]["name"], c["function"]["arguments"]) for c in calls]
    # and the parsed message encodes to the very same text
    assert encode_messages([parsed], mode, context=question) == text
