"""--live-history's reply handling (pure): which streamed text is reasoning, and the
assistant message a raw DeepSeek-V4 completion becomes."""

from __future__ import annotations

import orjson

from encoders.deepseek_v4 import EOS
from encoders.dsml import TOOL_CALLS_OPEN
from loadgen.client.events import decode_event
from loadgen.workload.bodies import Chat
from loadgen.workload.reply import ReplyText, assistant_message, dsv4_message


def chat_event(delta: dict[str, str]) -> bytes:
    return orjson.dumps({"choices": [{"index": 0, "delta": delta}]})


def test_chat_reasoning_deltas_are_told_apart_from_content() -> None:
    reply = ReplyText()
    for delta in (
        {"reasoning": "think "},
        {"reasoning_content": "more"},
        {"content": "answer"},
        {"role": "assistant"},
    ):
        event = decode_event(chat_event(delta))
        reply.add(event.text, event.reasoning)
    assert (reply.reasoning, reply.content) == (["think ", "more"], ["answer", ""])
    assert assistant_message(reply, builder=Chat(), encoder="dsv4", thinking="thinking") == {
        "role": "assistant",
        "content": "answer",
        "reasoning": "think more",
    }
    assert not decode_event(b'{"choices":[{"index":0,"text":"x"}]}').reasoning


def test_empty_reply() -> None:
    reply = ReplyText()
    reply.add("", False)
    assert reply.empty
    reply.add("r", True)
    assert not reply.empty


def test_dsv4_completion_split_as_the_encoder_parses_it() -> None:
    assert dsv4_message("why</think>so", "thinking") == {
        "role": "assistant",
        "content": "so",
        "reasoning_content": "why",
    }
    # cut short by max_tokens inside the reasoning: all of it is reasoning
    assert dsv4_message("still thinking", "thinking")["content"] == ""
    # chat mode: no reasoning, the whole text is content
    assert dsv4_message("plain", "chat") == {
        "role": "assistant",
        "content": "plain",
        "reasoning_content": None,
    }


def test_dsv4_completion_the_parser_refuses_is_kept_as_text() -> None:
    cut_call = f"why</think>doing it\n\n{TOOL_CALLS_OPEN}\n<｜DSML｜invoke name="
    assert dsv4_message(cut_call, "thinking") == {
        "role": "assistant",
        "content": cut_call.split("</think>")[1],
        "reasoning_content": "why",
    }
    after_eos = f"a</think>b{EOS}c"
    assert dsv4_message(after_eos, "thinking") == {
        "role": "assistant",
        "content": "bc",
        "reasoning_content": "a",
    }
