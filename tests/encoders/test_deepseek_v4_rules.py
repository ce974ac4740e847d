"""Each rule of the DeepSeek-V4 format on its own, with hand-written expected prompts."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from encoders.deepseek_v4 import (
    BOS,
    EOS,
    EncodingError,
    encode_messages,
    wrap_user,
)
from encoders.dsv4_texts import TOOLS_SECTION_HEAD, TOOLS_SECTION_TAIL
from loadgen.tokenizer import DSV4_SPECIAL_IDS, encode, load_tokenizer

U, A = "<｜User｜>", "<｜Assistant｜>"
SYSTEM = {"role": "system", "content": "Be brief."}
WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "weather",
        "description": "天气",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}},
    },
}


def user(text: str, **extra: Any) -> dict[str, Any]:
    return {"role": "user", "content": text, **extra}


def assistant(content: str, reasoning: str | None = None, **extra: Any) -> dict[str, Any]:
    return {"role": "assistant", "content": content, "reasoning_content": reasoning, **extra}


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return load_tokenizer()


# --- modes, system, BOS -------------------------------------------------------------------


def test_thinking_and_chat_openings() -> None:
    assert encode_messages([SYSTEM, user("hi")], "thinking") == f"{BOS}Be brief.{U}hi{A}<think>"
    assert encode_messages([SYSTEM, user("hi")], "chat") == f"{BOS}Be brief.{U}hi{A}</think>"


def test_without_default_bos() -> None:
    assert encode_messages([user("hi")], "chat", add_default_bos_token=False) == f"{U}hi{A}</think>"


def test_special_tokens_encode_to_their_ids(tok: Tokenizer) -> None:
    text = encode_messages([user("hi")], "thinking")
    ids = DSV4_SPECIAL_IDS
    assert encode(tok, text) == [ids[BOS], ids[U], *encode(tok, "hi"), ids[A], ids["<think>"]]


# --- reasoning effort ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def effort_texts(dsv4_fixtures: Path) -> dict[str, str]:
    data = json.loads((dsv4_fixtures / "reasoning_effort.json").read_text(encoding="utf-8"))
    prompts: dict[str, str] = data["prompts"]
    return prompts


@pytest.mark.parametrize("effort", ["low", "high", "max"])
def test_effort_prefix_follows_bos_in_thinking_mode(
    effort: str, effort_texts: dict[str, str]
) -> None:
    messages = [SYSTEM, user("hi")]
    text = encode_messages(messages, "thinking", reasoning_effort=effort)
    assert text == BOS + effort_texts[effort] + f"Be brief.{U}hi{A}<think>"


def test_effort_texts_are_verbatim(effort_texts: dict[str, str]) -> None:
    assert effort_texts["low"] == ""
    high = encode_messages([user("x")], "thinking", reasoning_effort="high")
    top = encode_messages([user("x")], "thinking", reasoning_effort="max")
    assert high.startswith(BOS + "Reasoning Effort: Absolute maximum with no shortcuts")
    assert "Beyond maximum — exhaustive" in top  # em dash, not a hyphen
    assert high.count("Reasoning Effort") == top.count("Reasoning Effort") == 1


@pytest.mark.parametrize("effort", [None, "low", "high", "max"])
def test_effort_adds_nothing_in_chat_mode(effort: str | None) -> None:
    assert (
        encode_messages([user("hi")], "chat", reasoning_effort=effort) == f"{BOS}{U}hi{A}</think>"
    )


def test_effort_only_once_for_the_first_message(effort_texts: dict[str, str]) -> None:
    messages = [user("a"), assistant("b", "r"), user("c")]
    text = encode_messages(messages, "thinking", reasoning_effort="max")
    assert text.count(effort_texts["max"]) == 1
    later = encode_messages(messages[1:], "thinking", context=messages[:1], reasoning_effort="max")
    assert effort_texts["max"] not in later and BOS not in later


@pytest.mark.parametrize("effort", ["medium", "", "MAX", 3])
def test_unknown_effort_is_refused(effort: Any) -> None:
    with pytest.raises(EncodingError, match="reasoning_effort"):
        encode_messages([user("hi")], "thinking", reasoning_effort=effort)


# --- multi-turn: keep or drop reasoning ---------------------------------------------------


CONVERSATION = [SYSTEM, user("q1"), assistant("a1", "r1"), user("q2"), assistant("a2", "r2")]


def test_drop_thinking_removes_reasoning_before_the_last_user_turn() -> None:
    assert encode_messages(CONVERSATION, "thinking") == (
        f"{BOS}Be brief.{U}q1{A}</think>a1{EOS}{U}q2{A}<think>r2</think>a2{EOS}"
    )


def test_keep_thinking_renders_every_reasoning() -> None:
    assert encode_messages(CONVERSATION, "thinking", drop_thinking=False) == (
        f"{BOS}Be brief.{U}q1{A}<think>r1</think>a1{EOS}{U}q2{A}<think>r2</think>a2{EOS}"
    )


def test_chat_mode_never_renders_reasoning() -> None:
    for drop in (True, False):
        assert encode_messages(CONVERSATION, "chat", drop_thinking=drop) == (
            f"{BOS}Be brief.{U}q1{A}</think>a1{EOS}{U}q2{A}</think>a2{EOS}"
        )


def test_missing_reasoning_in_thinking_mode_is_an_empty_block() -> None:
    text = encode_messages([user("q"), assistant("a")], "thinking")
    assert text == f"{BOS}{U}q{A}<think></think>a{EOS}"


def test_tools_turn_dropping_off() -> None:
    with_tools = [{**SYSTEM, "tools": [WEATHER_TOOL]}, *CONVERSATION[1:]]
    text = encode_messages(with_tools, "thinking")
    assert f"{U}q1{A}<think>r1</think>a1{EOS}" in text


def test_agent_loop_after_the_last_user_keeps_reasoning() -> None:
    call = {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}
    messages = [
        user("old"), assistant("x", "r0"), user("new"),
        assistant("", "r1", tool_calls=[call]),
        {"role": "tool", "tool_call_id": "c1", "content": "42"},
    ]  # fmt: skip
    assert encode_messages(messages, "thinking") == (
        f"{BOS}{U}old{A}</think>x{EOS}{U}new{A}<think>r1</think>\n\n<｜DSML｜tool_calls>\n"
        f'<｜DSML｜invoke name="f">\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>{EOS}'
        f"{U}<tool_result>42</tool_result>{A}<think>"
    )


def test_earlier_developer_messages_are_dropped() -> None:
    messages = [
        {"role": "developer", "content": "old rules"}, user("q1"), assistant("a1"),
        {"role": "developer", "content": "new rules"},
    ]  # fmt: skip
    assert encode_messages(messages, "chat") == (
        f"{BOS}{U}q1{A}</think>a1{EOS}{U}new rules{A}</think>"
    )
    kept = encode_messages(messages, "chat", drop_thinking=False)
    assert kept.startswith(f"{BOS}{U}old rules{U}q1{A}")


# --- tools, tool calls, tool results ------------------------------------------------------


def test_tools_section_on_system_and_developer() -> None:
    schema = json.dumps(WEATHER_TOOL["function"], ensure_ascii=False)
    section = TOOLS_SECTION_HEAD + schema + TOOLS_SECTION_TAIL
    system = encode_messages([{**SYSTEM, "tools": [WEATHER_TOOL]}, user("q")], "chat")
    assert system == f"{BOS}Be brief.\n\n{section}{U}q{A}</think>"
    developer = encode_messages(
        [{"role": "developer", "content": "d", "tools": [WEATHER_TOOL]}], "chat"
    )
    assert developer == f"{BOS}{U}d\n\n{section}{A}</think>"
    assert '"天气"' in schema  # ensure_ascii=False keeps unicode as is


def test_response_format_is_appended() -> None:
    schema = {"type": "json_object"}
    text = encode_messages([{**SYSTEM, "response_format": schema}, user("q")], "chat")
    assert text.startswith(f"{BOS}Be brief.\n\n## Response Format:\n\n")
    assert text.endswith(f"{json.dumps(schema)}{U}q{A}</think>")


def test_tool_calls_render_strings_raw_and_other_values_as_json() -> None:
    arguments = {"city": 'Zürich "old"', "days": 3, "ok": True, "tags": ["a", 1], "x": None}
    call = {"type": "function", "function": {"name": "weather", "arguments": json.dumps(arguments)}}
    text = encode_messages([user("q"), assistant("Sure.", tool_calls=[call])], "chat")
    assert text.endswith(
        f"{A}</think>Sure.\n\n<｜DSML｜tool_calls>\n"
        '<｜DSML｜invoke name="weather">\n'
        '<｜DSML｜parameter name="city" string="true">Zürich "old"</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="days" string="false">3</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="ok" string="false">true</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="tags" string="false">["a", 1]</｜DSML｜parameter>\n'
        '<｜DSML｜parameter name="x" string="false">null</｜DSML｜parameter>\n'
        f"</｜DSML｜invoke>\n</｜DSML｜tool_calls>{EOS}"
    )
    as_dict = {"type": "function", "function": {"name": "weather", "arguments": arguments}}
    assert encode_messages([user("q"), assistant("Sure.", tool_calls=[as_dict])], "chat") == text


def test_tool_results_follow_the_call_order_and_merge() -> None:
    calls = [
        {"id": f"c{i}", "type": "function", "function": {"name": "f", "arguments": "{}"}}
        for i in (1, 2)
    ]
    messages = [
        user("q"), assistant("", tool_calls=calls),
        {"role": "tool", "tool_call_id": "c2", "content": "two"},
        {"role": "tool", "tool_call_id": "c1", "content": "one"},
        user("and?"),
    ]  # fmt: skip
    assert encode_messages(messages, "chat").endswith(
        f"{EOS}{U}<tool_result>one</tool_result>\n\n<tool_result>two</tool_result>\n\nand?"
        f"{A}</think>"
    )


def test_tool_results_without_matching_ids_keep_their_order() -> None:
    messages = [
        user("q"), assistant("", tool_calls=[{"function": {"name": "f", "arguments": "{}"}}]),
        {"role": "tool", "tool_call_id": "zz", "content": "b"},
        {"role": "tool", "content": "a"},
    ]  # fmt: skip
    text = encode_messages(messages, "chat")
    assert text.endswith(
        f"{U}<tool_result>b</tool_result>\n\n<tool_result>a</tool_result>{A}</think>"
    )


def test_consecutive_user_messages_merge() -> None:
    text = encode_messages([user("a"), user("b")], "thinking")
    assert text == f"{BOS}{U}a\n\nb{A}<think>"


# --- latest_reminder and tasks ------------------------------------------------------------


def test_latest_reminder_and_its_place() -> None:
    reminder = {"role": "latest_reminder", "content": "2026-01-01"}
    before = encode_messages([SYSTEM, reminder, user("q")], "chat")
    assert before == f"{BOS}Be brief.<｜latest_reminder｜>2026-01-01{U}q{A}</think>"
    after = encode_messages([user("q"), reminder, assistant("a")], "chat")
    assert after == f"{BOS}{U}q{A}</think><｜latest_reminder｜>2026-01-01a{EOS}"


@pytest.mark.parametrize("task", ["action", "query", "authority", "domain", "title", "read_url"])
def test_task_token_follows_the_assistant_opening(task: str) -> None:
    text = encode_messages([user("q", task=task), assistant("x")], "chat")
    assert text == f"{BOS}{U}q{A}</think><｜{task}｜>x{EOS}"
    prompt = encode_messages([user("q", task=task)], "thinking")
    assert prompt == f"{BOS}{U}q{A}<think><｜{task}｜>"


# --- unicode and context ------------------------------------------------------------------


def test_unicode_passes_through_unchanged(tok: Tokenizer) -> None:
    content = "naïve café — 世界 🌍 \u200b ＡＢＣ"
    text = encode_messages([user(content)], "chat")
    assert text == f"{BOS}{U}{content}{A}</think>"
    assert tok.decode(encode(tok, text), skip_special_tokens=False) == text


def test_context_is_steering_but_not_output() -> None:
    split = 3
    full = encode_messages(CONVERSATION, "thinking")
    tail = encode_messages(CONVERSATION[split:], "thinking", context=CONVERSATION[:split])
    assert tail == f"{U}q2{A}<think>r2</think>a2{EOS}"
    assert full.endswith(tail)
    # The assistant answering a user turn in the context is exactly its completion text.
    answer = encode_messages([CONVERSATION[4]], "thinking", context=CONVERSATION[:4])
    assert answer == f"r2</think>a2{EOS}"


def test_context_may_not_split_a_merged_turn() -> None:
    with pytest.raises(EncodingError, match=r"message 1: the context ends inside one merged"):
        encode_messages([user("b")], "chat", context=[user("a")])


# --- wrap_user ----------------------------------------------------------------------------


@pytest.mark.parametrize("mode", ["chat", "thinking"])
@pytest.mark.parametrize("effort", [None, "low", "high", "max"])
def test_wrap_user_matches_encode_messages(mode: str, effort: str | None) -> None:
    for content in ("", "hello", "多语言 text\n\nwith blank lines"):
        prefix, suffix = wrap_user(content, mode, reasoning_effort=effort)
        encoded = encode_messages([user(content)], mode, reasoning_effort=effort)
        assert prefix + content + suffix == encoded


# --- errors name the message index --------------------------------------------------------


@pytest.mark.parametrize(
    ("messages", "pattern"),
    [
        ([user("a"), {"role": "robot", "content": "x"}], r"message 1: unknown role 'robot'"),
        ([{"content": "x"}], r"message 0: unknown role None"),
        ([SYSTEM, {"role": "developer"}], r"message 1: developer message without content"),
        ([{"role": "developer", "content": None}], r"message 0: developer message without"),
        ([user("a"), user(None)], r"message 1: user message without content"),  # type: ignore[arg-type]
        ([{"role": "tool"}], r"message 0: tool message without content"),
        ([SYSTEM, assistant("a")], r"message 1: an assistant message must follow a user"),
        ([user("a"), assistant("b"), assistant("c")], r"message 2: an assistant message"),
        ([user("a", task="summary")], r"message 0: unknown task 'summary'"),
        ([{**SYSTEM, "task": "action"}], r"message 0: task is only allowed on user"),
        ([user("a", tools=[WEATHER_TOOL])], r"message 0: tools is only allowed on system"),
        ([{**SYSTEM, "tools": [{"type": "function"}]}], r"message 0: tool 0 must be an OpenAI"),
        ([user("a"), "text"], r"message 1: must be an object"),
        ([user([{"type": "text", "text": "a"}])], r"message 0: user message without content"),  # type: ignore[arg-type]
        (
            [user("a"), assistant("", tool_calls=[{"function": {"name": "f", "arguments": "{x"}}])],
            r"message 1, tool call 0 \(f\): arguments are not valid JSON",
        ),
        (
            [
                user("a"),
                assistant("", tool_calls=[{"function": {"name": "f", "arguments": "[1]"}}]),
            ],
            r"message 1, tool call 0 \(f\): arguments must be a JSON object",
        ),
        (
            [user("a"), assistant("", tool_calls=[{"function": {"arguments": "{}"}}])],
            r"message 1, tool call 0: the function name must be",
        ),
    ],
)
def test_invalid_messages_raise_encoding_error(messages: list[Any], pattern: str) -> None:
    with pytest.raises(EncodingError, match=pattern):
        encode_messages(messages, "thinking")


@pytest.mark.parametrize("mode", ["Thinking", "think", "", None])
def test_unknown_mode_is_refused(mode: Any) -> None:
    with pytest.raises(EncodingError, match="thinking_mode must be 'chat' or 'thinking'"):
        encode_messages([user("a")], mode)
    with pytest.raises(EncodingError, match="thinking_mode"):
        wrap_user("a", mode)


def test_encoding_error_is_a_value_error() -> None:
    assert issubclass(EncodingError, ValueError)


def test_the_issue_known_vector(tok: Tokenizer) -> None:
    text = encode_messages([user("Hello, 世界")], "chat")
    assert text == "<｜begin▁of▁sentence｜><｜User｜>Hello, 世界<｜Assistant｜></think>"
    assert encode(tok, text) == [0, 128803, 19923, 14, 223, 3427, 128804, 128822]
