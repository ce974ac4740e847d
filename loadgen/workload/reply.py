"""`--live-history`: a session turn's streamed reply, and the assistant message it becomes.

The client's ingest appends each event's text to the turn's `ReplyText` (only requests
that carry one: the default, recorded history pays nothing); the session replay reads it
once the turn has ended, and the renderer puts `assistant_message(...)` into the history
of the session's later turns in place of the recorded assistant message.

/v1/completions: the raw text is what DeepSeek-V4 generated after the prompt's assistant
opening (`reasoning</think>content` in thinking mode), parsed by the encoder's own
parser, so the next prompt renders it exactly as a DeepSeek-V4 agent would (earlier
reasoning dropped per `drop_thinking`, tool calls in DSML). /v1/chat/completions: the
content, and the reasoning vLLM streamed separately as `reasoning` (vLLM 0.32's field;
its chat template applies the model's own drop rule), as a chat client sends them back.
"""

from __future__ import annotations

from typing import Any, Protocol

from encoders import EncodingError
from encoders.deepseek_v4 import EOS, THINK_CLOSE, parse_message_from_completion_text


class ReplyText:
    """The text of one reply as it streams: content, and reasoning where the server sends
    it apart (chat's `delta.reasoning`); mutable, written by one request's ingest."""

    __slots__ = ("_message", "content", "reasoning")

    def __init__(self) -> None:
        self.content: list[str] = []
        self.reasoning: list[str] = []
        # assistant_message's result, once the reply is complete: every later turn of the
        # session renders it, and the DSv4 parse need not run again for each
        self._message: tuple[tuple[str, str, str], dict[str, Any]] | None = None

    def add(self, text: str, reasoning: bool) -> None:
        (self.reasoning if reasoning else self.content).append(text)

    @property
    def empty(self) -> bool:
        return not any(self.content) and not any(self.reasoning)


def assistant_message(
    reply: ReplyText, *, builder: HistoryMessage, encoder: str, thinking: str
) -> dict[str, Any]:
    """The history's assistant message for `reply`, as the endpoint's client sends it
    (`builder`: the request builder of the run's endpoint, workload/bodies.py; made once
    per reply and settings; read it only after the reply has ended)."""
    key = (builder.name, encoder, thinking)
    cached = reply._message
    if cached is None or cached[0] != key:
        cached = reply._message = (key, builder.history_message(reply, encoder, thinking))
    return cached[1]


class HistoryMessage(Protocol):
    @property
    def name(self) -> str: ...

    def history_message(self, reply: ReplyText, encoder: str, thinking: str) -> dict[str, Any]: ...


def chat_message(reply: ReplyText) -> dict[str, Any]:
    """/v1/chat/completions: the content, and the reasoning streamed apart."""
    message: dict[str, Any] = {"role": "assistant", "content": "".join(reply.content)}
    if reply.reasoning:
        message["reasoning"] = "".join(reply.reasoning)
    return message


def completion_message(reply: ReplyText, encoder: str, thinking: str) -> dict[str, Any]:
    """/v1/completions: the raw text, parsed as the encoder's model would be."""
    content = "".join(reply.content)
    if encoder != "dsv4":  # the raw encoder renders contents only
        return {"role": "assistant", "content": content}
    return dsv4_message(content, thinking)


def dsv4_message(text: str, thinking: str) -> dict[str, Any]:
    """A raw DeepSeek-V4 completion -> its assistant message, by the encoder's parser.

    The parser takes a reply cut short by max_tokens (loadgen sends ignore_eos): in
    thinking mode, one without `</think>` is all reasoning. What it refuses (a tool-call
    block cut short, text after an end-of-sentence token) is split at the first
    `</think>` by hand and kept as plain content, so the history still holds the bytes
    the server sent.
    """
    try:
        message = parse_message_from_completion_text(text, thinking)
    except EncodingError:
        reasoning, closed, content = text.partition(THINK_CLOSE)
        if thinking != "thinking" or not closed:
            reasoning, content = "", text
        return {
            "role": "assistant",
            "content": content.replace(EOS, ""),
            "reasoning_content": reasoning.replace(EOS, "") or None,
        }
    if not message.get("tool_calls"):
        message.pop("tool_calls", None)
    return message
