"""DeepSeek-V4 chat format: messages -> the exact prompt text, completion text -> message.

A clean-room implementation written from the format's published facts and DeepSeek's golden
files (tests/encoders). Shape of a prompt:

    BOS [effort prefix] system [<｜latest_reminder｜>reminder]
    <｜User｜>user <｜Assistant｜><think>reasoning</think>answer [DSML calls]<｜end▁of▁sentence｜>
    <｜User｜><tool_result>...</tool_result> <｜Assistant｜><think> ...

Everything is text: special tokens are written out and the tokenizer maps them to their ids.

Decisions where the golden files are silent (each has a test):
- Chat mode never renders reasoning_content (every assistant turn opens with </think>).
- A task token goes right after the assistant opening of its turn (<think> or </think> as the
  mode says), so it ends the prompt; the parser skips a leading task token.
- Tool results are put in the preceding assistant's call order only when every result names
  one of its call ids (tool_call_id); otherwise they keep their order.
- "Last user message" (for drop_thinking) means the last user or developer message; tool
  results do not count, so reasoning inside an ongoing tool loop is kept.
- An assistant message must answer a user/developer/tool turn (latest_reminder messages may
  sit in between); a user turn followed by latest_reminder gets the assistant opening before
  the reminder, as the format rule says.
- response_format: content + "\n\n## Response Format:\n\nYou MUST strictly adhere to the
  following schema to reply:\n" + the JSON of the given object (wording of DeepSeek's
  earlier format); with tools it comes after the tools section. Tools with empty content
  still get the "\n\n" separator.
- `context` messages steer the rendering but are not output (nor BOS/effort prefix); a
  context may not end inside a merged user turn.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from encoders.dsml import TOOL_CALLS_OPEN, parse_tool_calls, render_tool_calls
from encoders.dsv4_texts import (
    REASONING_EFFORT_PREFIXES,
    RESPONSE_FORMAT_HEAD,
    TOOLS_SECTION_HEAD,
    TOOLS_SECTION_TAIL,
)
from encoders.errors import EncodingError

__all__ = [
    "EncodingError",
    "encode_messages",
    "parse_message_from_completion_text",
    "wrap_user",
]

BOS = "<｜begin▁of▁sentence｜>"
EOS = "<｜end▁of▁sentence｜>"
USER = "<｜User｜>"
ASSISTANT = "<｜Assistant｜>"
THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
LATEST_REMINDER = "<｜latest_reminder｜>"
TASK_TOKENS = {
    name: f"<｜{name}｜>"
    for name in ("action", "query", "authority", "domain", "title", "read_url")
}
THINKING_MODES = ("chat", "thinking")
ROLES = ("system", "user", "assistant", "tool", "developer", "latest_reminder")


def check_thinking_mode(thinking_mode: str) -> bool:
    """True for thinking mode; EncodingError for anything but "chat"/"thinking"."""
    if thinking_mode not in THINKING_MODES:
        raise EncodingError(f"thinking_mode must be 'chat' or 'thinking', got {thinking_mode!r}")
    return thinking_mode == "thinking"


def reasoning_effort_prefix(reasoning_effort: str | None, thinking: bool) -> str:
    if reasoning_effort not in REASONING_EFFORT_PREFIXES:
        raise EncodingError(
            f"reasoning_effort must be one of low, high, max (or None), got {reasoning_effort!r}"
        )
    return REASONING_EFFORT_PREFIXES[reasoning_effort] if thinking else ""


def wrap_user(
    content: str, thinking_mode: str, *, reasoning_effort: str | None = None
) -> tuple[str, str]:
    """(prefix, suffix) with prefix + content + suffix == the prompt of one user message."""
    if not isinstance(content, str):
        raise EncodingError(f"message 0: content must be a string, got {type(content).__name__}")
    thinking = check_thinking_mode(thinking_mode)
    prefix = BOS + reasoning_effort_prefix(reasoning_effort, thinking) + USER
    return prefix, ASSISTANT + (THINK_OPEN if thinking else THINK_CLOSE)


def encode_messages(
    messages: Sequence[Mapping[str, Any]],
    thinking_mode: str,
    *,
    context: Sequence[Mapping[str, Any]] | None = None,
    drop_thinking: bool = True,
    add_default_bos_token: bool = True,
    reasoning_effort: str | None = None,
) -> str:
    """The prompt text of `messages`.

    `context` holds messages that precede `messages` and were already encoded: they steer
    the rendering (merging, dropping, tool-result order) but are not part of the output,
    and neither are BOS and the effort prefix, which belong to the first message.
    """
    thinking = check_thinking_mode(thinking_mode)
    effort = reasoning_effort_prefix(reasoning_effort, thinking)
    earlier = list(context or ())
    conversation = [*earlier, *messages]
    for index, message in enumerate(conversation):
        _check_message(index, message)
    has_tools = any(message.get("tools") for message in conversation)
    user_indices = [i for i, m in enumerate(conversation) if m["role"] in ("user", "developer")]
    rules = _Rules(
        thinking=thinking,
        drop_thinking=drop_thinking and not has_tools,
        last_user=user_indices[-1] if user_indices else -1,
    )
    start = len(earlier)
    parts = [(BOS if add_default_bos_token else "") + effort] if start == 0 else []
    for first, last, text in _render(conversation, rules):
        if first >= start:
            parts.append(text)
        elif last >= start:
            raise EncodingError(
                f"message {start}: the context ends inside one merged user turn (messages "
                f"{first}..{last}); end the context before message {first} or after {last}"
            )
    return "".join(parts)


@dataclass(frozen=True, slots=True)
class _Rules:
    thinking: bool
    drop_thinking: bool
    last_user: int  # index of the last user or developer message, -1 if none

    def dropped(self, index: int, message: Mapping[str, Any]) -> bool:
        return self.drop_thinking and message["role"] == "developer" and index < self.last_user

    def opening(self, turn_last_index: int) -> str:
        """What follows <｜Assistant｜>: <think> opens reasoning, </think> skips it."""
        keep = self.thinking and (not self.drop_thinking or turn_last_index >= self.last_user)
        return THINK_OPEN if keep else THINK_CLOSE


def _render(conversation: Sequence[Mapping[str, Any]], rules: _Rules) -> list[tuple[int, int, str]]:
    """(first message index, last message index, text) for each rendered turn, in order."""
    kept = [(i, m) for i, m in enumerate(conversation) if not rules.dropped(i, m)]
    turns: list[tuple[int, int, str]] = []
    opening: str | None = None  # the assistant opening awaiting an answer
    position = 0
    while position < len(kept):
        index, message = kept[position]
        role = message["role"]
        if role == "assistant":
            if opening is None:
                raise EncodingError(
                    f"message {index}: an assistant message must follow a user, developer or "
                    "tool message (optionally with latest_reminder messages in between)"
                )
            turns.append((index, index, _assistant_text(index, message, opening == THINK_OPEN)))
            opening, position = None, position + 1
        elif role == "system":
            turns.append((index, index, _with_tools(index, message)))
            opening, position = None, position + 1
        elif role == "latest_reminder":
            turns.append((index, index, LATEST_REMINDER + message["content"]))
            position += 1
        else:
            end = position + 1
            if role != "developer":
                while end < len(kept) and kept[end][1]["role"] in ("user", "tool"):
                    end += 1
            run = kept[position:end]
            following = kept[end][1]["role"] if end < len(kept) else None
            opening = rules.opening(run[-1][0]) if following in (None, *_ANSWERED_BY) else None
            text = USER + _turn_body(run, conversation)
            text += (ASSISTANT + opening if opening else "") + _task_tokens(run)
            turns.append((run[0][0], run[-1][0], text))
            position = end
    return turns


# A user turn is followed by the assistant opening when it is the last message or when one
# of these comes next.
_ANSWERED_BY = ("assistant", "latest_reminder")


def _turn_body(
    run: Sequence[tuple[int, Mapping[str, Any]]], conversation: Sequence[Mapping[str, Any]]
) -> str:
    first_index, first = run[0]
    if first["role"] == "developer":
        return _with_tools(first_index, first)
    ordered = _in_call_order(run, conversation)
    return "\n\n".join(
        f"<tool_result>{m['content']}</tool_result>" if m["role"] == "tool" else m["content"]
        for m in ordered
    )


def _in_call_order(
    run: Sequence[tuple[int, Mapping[str, Any]]], conversation: Sequence[Mapping[str, Any]]
) -> list[Mapping[str, Any]]:
    """The run's messages with tool results put in the preceding assistant's call order.

    Only when every result names a call of that assistant (tool_call_id); otherwise the
    results keep their own order. User messages keep their places.
    """
    messages = [m for _, m in run]
    results = [m for m in messages if m["role"] == "tool"]
    assistants = [m for m in conversation[: run[0][0]] if m["role"] == "assistant"]
    calls = (assistants[-1].get("tool_calls") or []) if assistants else []
    call_ids = [c.get("id") for c in calls if isinstance(c, Mapping)]
    result_ids = [m.get("tool_call_id") for m in results]
    if not results or not all(i is not None and i in call_ids for i in result_ids):
        return messages
    reordered = iter(sorted(results, key=lambda m: call_ids.index(m.get("tool_call_id"))))
    return [next(reordered) if m["role"] == "tool" else m for m in messages]


def _task_tokens(run: Sequence[tuple[int, Mapping[str, Any]]]) -> str:
    return "".join(TASK_TOKENS[m["task"]] for _, m in run if m.get("task") is not None)


def _with_tools(index: int, message: Mapping[str, Any]) -> str:
    """System or developer text: content, then the tools section, then the response format."""
    text: str = message.get("content") or ""
    if message.get("tools"):
        text += "\n\n" + tools_section(message["tools"], f"message {index}")
    if message.get("response_format") is not None:
        schema = json.dumps(message["response_format"], ensure_ascii=False)
        text += "\n\n" + RESPONSE_FORMAT_HEAD + schema
    return text


def tools_section(tools: Sequence[Any], where: str) -> str:
    schemas = []
    for number, tool in enumerate(tools):
        function = tool.get("function", tool) if isinstance(tool, Mapping) else None
        if not isinstance(function, Mapping) or not isinstance(function.get("name"), str):
            raise EncodingError(
                f"{where}: tool {number} must be an OpenAI tool "
                '({"type": "function", "function": {"name": ..., "parameters": ...}})'
            )
        schemas.append(json.dumps(function, ensure_ascii=False))
    return TOOLS_SECTION_HEAD + "\n".join(schemas) + TOOLS_SECTION_TAIL


def _assistant_text(index: int, message: Mapping[str, Any], reasoning_open: bool) -> str:
    text = ""
    if reasoning_open:
        text += (message.get("reasoning_content") or "") + THINK_CLOSE
    text += message.get("content") or ""
    tool_calls = message.get("tool_calls")
    if tool_calls:
        text += "\n\n" + render_tool_calls(tool_calls, f"message {index}")
    return text + EOS


def _check_message(index: int, message: Any) -> None:
    """Reject what cannot be encoded, naming the message index and the fault."""
    where = f"message {index}"
    if not isinstance(message, Mapping):
        raise EncodingError(f"{where}: must be an object, got {type(message).__name__}")
    role = message.get("role")
    if role not in ROLES:
        raise EncodingError(f"{where}: unknown role {role!r}; expected one of {', '.join(ROLES)}")
    content = message.get("content")
    if role in ("system", "assistant"):
        if content is not None and not isinstance(content, str):
            raise EncodingError(f"{where}: {role} content must be a string or null")
    elif not isinstance(content, str):
        raise EncodingError(
            f"{where}: {role} message without content (content must be a string, "
            f"got {type(content).__name__})"
        )
    _check_optional_fields(where, role, message)


def _check_optional_fields(where: str, role: str, message: Mapping[str, Any]) -> None:
    for key in ("tools", "response_format"):
        if message.get(key) is not None and role not in ("system", "developer"):
            raise EncodingError(f"{where}: {key} is only allowed on system or developer messages")
    tools = message.get("tools")
    if tools is not None and not isinstance(tools, list):
        raise EncodingError(f"{where}: tools must be a list of OpenAI tools")
    task = message.get("task")
    if task is not None:
        if role not in ("user", "developer"):
            raise EncodingError(f"{where}: task is only allowed on user or developer messages")
        if task not in TASK_TOKENS:
            raise EncodingError(
                f"{where}: unknown task {task!r}; expected one of {', '.join(TASK_TOKENS)}"
            )
    if role == "assistant":
        reasoning = message.get("reasoning_content")
        if reasoning is not None and not isinstance(reasoning, str):
            raise EncodingError(f"{where}: reasoning_content must be a string or null")
        tool_calls = message.get("tool_calls")
        if tool_calls is not None and not isinstance(tool_calls, list):
            raise EncodingError(f"{where}: tool_calls must be a list")


def parse_message_from_completion_text(text: str, thinking_mode: str) -> dict[str, Any]:
    """The assistant message in a completion: the text after <｜Assistant｜><think> (thinking)
    or <｜Assistant｜></think> (chat), up to and including <｜end▁of▁sentence｜>.

    A leading task token (part of the prompt of a task turn) is skipped. A text cut short
    (no end-of-sentence token, e.g. by max_tokens) inside the reasoning or the content
    parses as far as it goes; a cut-short tool-call block is malformed DSML.
    """
    thinking = check_thinking_mode(thinking_mode)
    if not isinstance(text, str):
        raise EncodingError(f"completion text must be a string, got {type(text).__name__}")
    body = _without_task_token(text)
    if body.endswith(EOS):
        body = body[: -len(EOS)]
    elif EOS in body:
        raise EncodingError(f"completion text: text follows {EOS}; pass one message at a time")
    reasoning: str | None = None
    if thinking:
        end = body.find(THINK_CLOSE)
        if end < 0:
            if text.endswith(EOS):
                raise EncodingError(
                    f"completion text: the reasoning is never closed by {THINK_CLOSE}"
                )
            return _message("", body, [])
        reasoning, body = body[:end], body[end + len(THINK_CLOSE) :]
    block = body.find(TOOL_CALLS_OPEN)
    if block < 0:
        return _message(body, reasoning, [])
    calls, end = parse_tool_calls(body, block)
    if body[end:].strip():
        raise EncodingError(
            f"completion text: unexpected text after the tool calls: {body[end:]!r}"
        )
    return _message(body[:block].removesuffix("\n\n"), reasoning, calls)


def _without_task_token(text: str) -> str:
    for token in TASK_TOKENS.values():
        if text.startswith(token):
            return text[len(token) :]
    return text


def _message(content: str, reasoning: str | None, calls: list[dict[str, Any]]) -> dict[str, Any]:
    return {
        "role": "assistant",
        "content": content,
        "reasoning_content": reasoning,
        "tool_calls": calls,
    }
