"""A typed fast path for `decode_event`: msgspec decodes the shapes vLLM sends.

`decode_event` (events.py) is the reference: orjson into dicts, then every field the
client uses is checked by hand. Here msgspec decodes straight into Structs whose types
carry the same checks (counts are ints in 0..2^31-1, texts are str, bools are not ints),
in C, in about half the time. Anything these types do not describe -- an unknown
field, a value of another type, an error object, a count out of range -- makes msgspec
raise, and the reference decodes the payload instead: so every outcome, a StreamEvent
or a MalformedEvent and its message, is the reference's (tests/client/
test_fast_events.py compares both on random and mutated events).

Why every field is declared and unknown ones refused (not skipped): msgspec does not
validate what it skips, so a skipped `1e400` or a stray invalid UTF-8 byte would pass
here while orjson refuses the whole payload. Declared fields are fully validated, ints
are bounded to 64 bits (orjson turns bigger ones into floats, and past 1e308 refuses
them), and a field of a newer server version simply takes the reference path.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Annotated, Any

import msgspec

from loadgen.client.events import (
    DONE_EVENT,
    MAX_TOKEN_COUNT,
    StreamEvent,
    decode_event,
    usage_event,
)
from loadgen.client.request_metrics import BadRequestMetrics, WireMetrics, from_wire

Count = Annotated[int, msgspec.Meta(ge=0, le=MAX_TOKEN_COUNT)]
Int64 = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


class _Struct(msgspec.Struct, forbid_unknown_fields=True, gc=False):
    """Unknown fields refused (see the module doc); never in a cycle, so not GC-tracked."""


class _Details(_Struct):
    cached_tokens: Count | None = None


class _Usage(_Struct):
    prompt_tokens: Count | None = None
    completion_tokens: Count | None = None
    total_tokens: Int64 | None = None
    prompt_tokens_details: _Details | None = None
    completion_tokens_details: None = None


class _Delta(_Struct):
    role: str | None = None
    content: str | None = None
    reasoning_content: str | None = None
    reasoning: str | None = None


class _TopLogprob(_Struct):
    token: str
    logprob: float
    bytes: list[Int64] | None = None


class _ChatLogprob(_Struct):
    token: str
    logprob: float
    bytes: list[Int64] | None = None
    top_logprobs: list[_TopLogprob] | None = None


class _Logprobs(_Struct):
    # /v1/completions
    tokens: list[str] | None = None
    token_logprobs: list[float | None] | None = None
    text_offset: list[Int64] | None = None
    top_logprobs: list[dict[str, float] | None] | None = None
    # /v1/chat/completions
    content: list[_ChatLogprob] | None = None
    refusal: None = None


# The one choice asked for is index 0; any other (a choices[0] with index 1) takes the
# reference path, which refuses it.
ChoiceIndex = Annotated[int, msgspec.Meta(ge=0, le=0)]


class _Choice(_Struct):
    index: ChoiceIndex | None = None
    text: str | None = None
    delta: _Delta | None = None
    logprobs: _Logprobs | None = None
    finish_reason: str | None = None
    stop_reason: Int64 | str | None = None
    prompt_token_ids: list[Int64] | None = None
    token_ids: list[Int64] | None = None


class _Chunk(_Struct):
    choices: list[_Choice]
    id: str | None = None
    object: str | None = None
    created: Int64 | None = None
    model: str | None = None
    usage: _Usage | None = None
    system_fingerprint: str | None = None
    prompt_token_ids: list[Int64] | None = None
    prompt_text: str | None = None
    service_tier: None = None
    metrics: WireMetrics | None = None  # vLLM's per-request figures (final usage chunk)


_decode = msgspec.json.Decoder(_Chunk).decode
_new_event: Callable[[type[StreamEvent], tuple[Any, ...]], StreamEvent] = tuple.__new__


def decode_event_fast(data: bytes) -> StreamEvent:
    """`decode_event`'s result for `data`, decoded by msgspec when it has the usual shape."""
    if data == b"[DONE]":
        return DONE_EVENT
    try:
        chunk = _decode(data)
    except (msgspec.DecodeError, ValueError, RecursionError):  # incl. invalid UTF-8
        return decode_event(data)
    if chunk.object == "error":
        return decode_event(data)
    usage = chunk.usage
    completion = prompt = cached = None
    if usage is not None:
        completion, prompt = usage.completion_tokens, usage.prompt_tokens
        details = usage.prompt_tokens_details
        if details is not None:
            cached = details.cached_tokens
            if cached is not None and prompt is not None and cached > prompt:
                return decode_event(data)  # the reference words the complaint
    choices = chunk.choices
    if not choices:
        try:
            server = None if chunk.metrics is None else from_wire(chunk.metrics)
            return usage_event(completion, prompt, cached, server, chunk.id)
        except BadRequestMetrics:
            return decode_event(data)  # the reference words the complaint
    choice = choices[0]
    token_ids, logprobs, text = choice.token_ids, choice.logprobs, choice.text
    reasoning = False
    if text is None:
        text, reasoning = _text(choice)
    return _new_event(
        StreamEvent,
        (
            False,  # done
            True,  # has_choice
            None if token_ids is None else len(token_ids),
            None if logprobs is None else _logprob_count(logprobs),
            text,
            completion,
            prompt,
            choice.finish_reason,
            None,  # error
            cached,
            reasoning,
            token_ids,
            chunk.id,
        ),
    )


def _text(choice: _Choice) -> tuple[str, bool]:
    """As events._text, `text` being null: the delta's content, else its reasoning (and
    whether it is reasoning)."""
    delta = choice.delta
    if delta is None:
        return "", False
    text = delta.content
    if text is not None:
        return text, False
    text = delta.reasoning_content or delta.reasoning
    if text is None:  # an empty reasoning delta ("") is still reasoning: its phase counts
        if delta.reasoning_content is None:
            return "", False
        text = ""
    return text, True


def _logprob_count(logprobs: _Logprobs) -> int | None:
    if logprobs.tokens is not None:
        return len(logprobs.tokens)
    return None if logprobs.content is None else len(logprobs.content)
