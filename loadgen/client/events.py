"""One streamed response event as vLLM sends it, and how many tokens it carries.

Runs off the timing path (the ingest calls it after the read was stamped), once per
event: the hot path of the client's CPU cost, hence NamedTuples and few dict lookups.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import orjson

from loadgen.client.request_metrics import (
    BadRequestMetrics,
    RequestMetrics,
    from_sglext,
    from_value,
)
from loadgen.records import TokenSource

MAX_TOKEN_COUNT = 2**31 - 1  # a count above this is a lie, not a long request
_SHOWN = 80  # characters of a bad value quoted in a MalformedEvent message


class MalformedEvent(ValueError):
    """An SSE data payload that is not JSON, not a completion chunk, or carries a value
    of the wrong type or an impossible one (the server's data is validated here, before
    any arithmetic sees it)."""


class StreamEvent(NamedTuple):
    """What one `data:` event says, before deciding how many tokens it carries.

    A NamedTuple rather than a frozen dataclass: one is built per streamed event, and
    tuple construction costs a fraction of a frozen dataclass's per-field setattr.
    Every field is validated: counts are ints in 0..MAX_TOKEN_COUNT, texts are str.
    """

    done: bool = False  # the `[DONE]` sentinel
    has_choice: bool = False  # usage-only and error events carry no generated text
    token_ids: int | None = None  # len(choices[0].token_ids) when present
    logprobs: int | None = None  # logprob entries when present
    text: str = ""
    completion_tokens: int | None = None  # cumulative usage when present
    prompt_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None  # an error object inside the stream
    cached_tokens: int | None = None  # usage.prompt_tokens_details.cached_tokens (vLLM)
    reasoning: bool = False  # text is chat's delta.reasoning(_content), not its content
    # the chunk's token ids as sent (None without return_token_ids): only --record-outputs
    # reads them (client/outputs.py); holding the list the decoder made costs nothing
    ids: list[Any] | None = None
    # the chunk's `id` (None when absent or not a string): every chunk of one response
    # carries its response's id, so a change, or the previous response's id, shows an
    # answer out of step (ingest.py `Exchange.on_event`)
    chunk_id: str | None = None


DONE_EVENT = StreamEvent(done=True)


class MetricsEvent(StreamEvent):
    """The final usage event (no choices) when it carries vLLM's per-request `metrics`: a
    StreamEvent for everything that reads events, plus the server's figures, which only
    the ingest's no-token branch looks for (so token-bearing chunks pay nothing)."""

    metrics: RequestMetrics


def usage_event(
    completion: int | None,
    prompt: int | None,
    cached: int | None,
    metrics: RequestMetrics | None = None,
    chunk_id: str | None = None,
) -> StreamEvent:
    """An event without choices (the final usage), for both decoders; with vLLM's
    per-request `metrics` a MetricsEvent. Once per stream: not the per-chunk path."""
    event = StreamEvent(
        completion_tokens=completion,
        prompt_tokens=prompt,
        cached_tokens=cached,
        chunk_id=chunk_id,
    )
    if metrics is None:
        return event
    with_metrics = _new_event(MetricsEvent, tuple(event))
    with_metrics.metrics = metrics  # type: ignore[attr-defined]  # a NamedTuple subclass's __dict__
    return with_metrics


def show(value: Any) -> str:
    """A short, always-printable description of a JSON value from the server.

    Never str()/repr() of a container (a 1,000-deep nesting would recurse past Python's
    limit) nor of a huge int (int -> str is limited to 4,300 digits).
    """
    if isinstance(value, bool) or value is None:
        return orjson.dumps(value).decode()
    if isinstance(value, str):
        return orjson.dumps(value[:_SHOWN]).decode() + ("..." if len(value) > _SHOWN else "")
    if isinstance(value, int):  # orjson yields ints of at most 64 bits, but be sure
        if -(10**30) < value < 10**30:
            return str(value)
        return f"an integer of {value.bit_length()} bits"
    if isinstance(value, float):
        return repr(value)
    return "a list" if isinstance(value, list) else "an object"


def _bad(field: str, value: Any, expected: str) -> MalformedEvent:
    return MalformedEvent(f"{field} is {show(value)}, expected {expected}")


def _count(value: Any, field: str) -> int | None:
    """A token count as sent, or MalformedEvent: bools, floats, negatives are not counts."""
    if value is None or (type(value) is int and 0 <= value <= MAX_TOKEN_COUNT):
        return value
    raise _bad(field, value, f"an integer in 0..{MAX_TOKEN_COUNT}")


def _usage(usage: Any) -> tuple[int | None, int | None, int | None]:
    """(completion_tokens, prompt_tokens, cached_tokens) of a usage object, all checked."""
    if type(usage) is not dict:
        raise _bad("usage", usage, "an object or null")
    completion, prompt = usage.get("completion_tokens"), usage.get("prompt_tokens")
    # Inline for the common case (exact ints in range); _count raises for the rest.
    if completion is not None and not (
        type(completion) is int and 0 <= completion <= MAX_TOKEN_COUNT
    ):
        _count(completion, "usage.completion_tokens")
    if prompt is not None and not (type(prompt) is int and 0 <= prompt <= MAX_TOKEN_COUNT):
        _count(prompt, "usage.prompt_tokens")
    details = usage.get("prompt_tokens_details")  # vLLM: null unless --enable-prompt-tokens-details
    if details is None:
        return completion, prompt, None
    return completion, prompt, _cached_tokens(details, prompt)


def _cached_tokens(details: Any, prompt: int | None) -> int | None:
    """usage.prompt_tokens_details.cached_tokens: a count, and no more than the prompt."""
    if type(details) is not dict:
        raise _bad("usage.prompt_tokens_details", details, "an object or null")
    field = "usage.prompt_tokens_details.cached_tokens"
    cached = _count(details.get("cached_tokens"), field)
    if cached is not None and prompt is not None and cached > prompt:
        raise _bad(field, cached, f"at most usage.prompt_tokens ({prompt})")
    return cached


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        message = error.get("message", "")
        message = message if isinstance(message, str) else show(message)
        return f"{_label(error.get('type', 'error'))} {_label(error.get('code', ''))}: {message}"
    return error if isinstance(error, str) else show(error)


def _label(value: Any) -> str:
    return value if isinstance(value, str) else show(value)


def _logprob_count(logprobs: Any) -> int | None:
    if logprobs is None:
        return None
    if not isinstance(logprobs, dict):
        raise _bad("choices[0].logprobs", logprobs, "an object or null")
    entries = logprobs.get("tokens")  # /v1/completions shape
    if entries is None:
        entries = logprobs.get("content")  # /v1/chat/completions shape
    if entries is None:
        return None
    if not isinstance(entries, list):
        raise _bad("choices[0].logprobs entries", entries, "a list")
    return len(entries)


def _text(choice: dict[str, Any]) -> tuple[str, bool]:
    """(text, whether it is reasoning) of a choice: `text` (completions), else the delta's
    content or, failing that, its reasoning (chat: vLLM streams them in separate deltas)."""
    text = choice.get("text")
    reasoning = False
    if text is None:
        delta = choice.get("delta")
        if delta is None:
            return "", False
        if not isinstance(delta, dict):
            raise _bad("choices[0].delta", delta, "an object")
        text = delta.get("content")
        if text is None:
            text = delta.get("reasoning_content") or delta.get("reasoning")
            if text is None:  # an empty reasoning delta ("") is still reasoning
                if delta.get("reasoning_content") is None:
                    return "", False
                text = ""
            reasoning = True
    if type(text) is not str:
        raise _bad("choices[0] text", text, "a string")
    return text, reasoning


# tuple.__new__ builds the NamedTuple without its Python-level __new__ (a lambda taking
# keywords): a third of decode_event's own cost once orjson has parsed the payload.
_new_event: Callable[[type[StreamEvent], tuple[Any, ...]], StreamEvent] = tuple.__new__


def decode_event(data: bytes) -> StreamEvent:
    """One SSE data payload -> StreamEvent; raises MalformedEvent on anything unexpected.

    The server is not trusted: every input either decodes into validated fields or
    raises MalformedEvent (tests/client/test_sse_properties.py fuzzes this), so no later
    arithmetic can meet a string, a bool, a float, a negative or a 2^70 count.
    """
    if data == b"[DONE]":
        return DONE_EVENT
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MalformedEvent(f"not JSON: {data[:120]!r}") from exc
    if type(obj) is not dict:
        raise MalformedEvent(f"not a JSON object: {show(obj)}")
    get = obj.get
    if "error" in obj or get("object") == "error":
        return StreamEvent(error=_error_text(get("error", obj)))
    chunk_id = get("id")
    if type(chunk_id) is not str:  # an id of another type says nothing comparable
        chunk_id = None
    usage = get("usage")
    completion_tokens = prompt_tokens = cached_tokens = None
    if usage is not None:
        completion_tokens, prompt_tokens, cached_tokens = _usage(usage)
    choices = get("choices")
    if type(choices) is not list:
        raise MalformedEvent(f"no choices list: {show(choices)}")
    if not choices:
        metrics, sglext = get("metrics"), get("sglext")
        try:
            server = None if metrics is None else from_value(metrics)
            if server is None and sglext is not None:  # SGLang's per-request acceptance
                server = (from_sglext(sglext), None)
            return usage_event(completion_tokens, prompt_tokens, cached_tokens, server, chunk_id)
        except BadRequestMetrics as exc:
            raise MalformedEvent(str(exc)) from None
    choice = choices[0]
    if type(choice) is not dict:
        raise MalformedEvent(f"choices[0] is {show(choice)}, expected an object")
    get = choice.get
    index = get("index")
    if index is not None and not (type(index) is int and index == 0):
        raise _bad("choices[0].index", index, "0 (one completion was asked for)")
    token_ids = get("token_ids")
    if token_ids is not None and type(token_ids) is not list:
        raise _bad("choices[0].token_ids", token_ids, "a list")
    finish_reason = get("finish_reason")
    if finish_reason is not None and type(finish_reason) is not str:
        raise _bad("choices[0].finish_reason", finish_reason, "a string or null")
    logprobs = get("logprobs")
    text = get("text")
    reasoning = False
    if type(text) is not str:  # not /v1/completions: chat's delta.content, else the rest
        delta = get("delta")
        text = delta.get("content") if type(delta) is dict else None
        if type(text) is not str:
            text, reasoning = _text(choice)
    return _new_event(
        StreamEvent,
        (  # the fields in declaration order
            False,  # done
            True,  # has_choice
            None if token_ids is None else len(token_ids),
            None if logprobs is None else _logprob_count(logprobs),
            text,
            completion_tokens,
            prompt_tokens,
            finish_reason,
            None,  # error
            cached_tokens,
            reasoning,
            token_ids,
            chunk_id,
        ),
    )


class TokenCounter:
    """Tokens per event, best source first (docs/design.md: tokens per chunk).

    The record keeps the worst source any chunk needed, so one re-tokenized chunk flags
    the whole request as approximate instead of hiding among exact counts.
    """

    __slots__ = ("_count_text", "_last_completion", "decrease", "source")

    def __init__(self, count_text: Callable[[str], int] | None = None) -> None:
        self._count_text = count_text
        self._last_completion = 0
        self.source = TokenSource.TOKEN_IDS
        # The first (before, after) where the cumulative usage went down: judged once, at
        # the request's end (Exchange.check_counts); noted only on the rare branch.
        self.decrease: tuple[int, int] | None = None

    def count(self, event: StreamEvent) -> int:
        _, has_choice, token_ids, logprobs, text, cumulative, _, _, _, _, _, _, _ = event
        if cumulative is not None:
            delta = cumulative - self._last_completion
            if delta > 0:
                self._last_completion = cumulative
            elif delta < 0 and self.decrease is None:
                self.decrease = (self._last_completion, cumulative)
        if not has_choice:
            return 0
        if token_ids is not None:
            return token_ids
        if cumulative is not None:
            return self._use(TokenSource.USAGE, max(delta, 0))
        if logprobs is not None:
            return self._use(TokenSource.LOGPROBS, logprobs)
        if not text:
            return 0
        count = self._count_text(text) if self._count_text else 1
        return self._use(TokenSource.TEXT, count)

    def _use(self, source: TokenSource, count: int) -> int:
        if count and _RANK[source] > _RANK[self.source]:
            self.source = source
        return count


_RANK = {
    TokenSource.TOKEN_IDS: 0,
    TokenSource.USAGE: 1,
    TokenSource.LOGPROBS: 2,
    TokenSource.TEXT: 3,
}
