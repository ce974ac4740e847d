"""One streamed response event as vLLM sends it, and how many tokens it carries.

Runs off the timing path (the ingest calls it after the read was stamped), once per
event: the hot path of the client's CPU cost, hence NamedTuples and few dict lookups.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, NamedTuple

import orjson

from loadgen.records import TokenSource


class MalformedEvent(ValueError):
    """An SSE data payload that is not JSON or not a completion chunk."""


class StreamEvent(NamedTuple):
    """What one `data:` event says, before deciding how many tokens it carries.

    A NamedTuple rather than a frozen dataclass: one is built per streamed event, and
    tuple construction costs a fraction of a frozen dataclass's per-field setattr.
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


DONE_EVENT = StreamEvent(done=True)


def _error_text(error: Any) -> str:
    if isinstance(error, dict):
        return f"{error.get('type', 'error')} {error.get('code', '')}: {error.get('message', '')}"
    return str(error)


def _logprob_count(logprobs: Any) -> int | None:
    if not isinstance(logprobs, dict):
        return None
    entries = logprobs.get("tokens")  # /v1/completions shape
    if entries is None:
        entries = logprobs.get("content")  # /v1/chat/completions shape
    return len(entries) if isinstance(entries, list) else None


# tuple.__new__ builds the NamedTuple without its Python-level __new__ (a lambda taking
# keywords): a third of decode_event's own cost once orjson has parsed the payload.
_new_event: Callable[[type[StreamEvent], tuple[Any, ...]], StreamEvent] = tuple.__new__


def decode_event(data: bytes) -> StreamEvent:
    """One SSE data payload -> StreamEvent; raises MalformedEvent on anything unexpected."""
    if data == b"[DONE]":
        return DONE_EVENT
    try:
        obj = orjson.loads(data)
    except orjson.JSONDecodeError as exc:
        raise MalformedEvent(f"not JSON: {data[:120]!r}") from exc
    if not isinstance(obj, dict):
        raise MalformedEvent(f"not a JSON object: {data[:120]!r}")
    get = obj.get
    if "error" in obj or get("object") == "error":
        return StreamEvent(error=_error_text(get("error", obj)))
    usage = get("usage")
    completion_tokens = prompt_tokens = cached_tokens = None
    if isinstance(usage, dict):
        completion_tokens = usage.get("completion_tokens")
        prompt_tokens = usage.get("prompt_tokens")
        details = usage.get("prompt_tokens_details")
        if isinstance(details, dict):
            cached_tokens = details.get("cached_tokens")
    choices = get("choices")
    if not isinstance(choices, list):
        raise MalformedEvent(f"no choices list: {data[:120]!r}")
    if not choices:
        return StreamEvent(completion_tokens=completion_tokens, prompt_tokens=prompt_tokens,
                           cached_tokens=cached_tokens)
    choice = choices[0]
    if not isinstance(choice, dict):
        raise MalformedEvent(f"choice is not an object: {data[:120]!r}")
    get = choice.get
    text = get("text")
    if text is None:
        delta = get("delta")
        text = delta.get("content") if isinstance(delta, dict) else None
        if text is None and isinstance(delta, dict):
            text = delta.get("reasoning_content") or delta.get("reasoning")
    token_ids = get("token_ids")
    logprobs = get("logprobs")
    return _new_event(StreamEvent, (  # the fields in declaration order
        False,  # done
        True,  # has_choice
        len(token_ids) if isinstance(token_ids, list) else None,
        None if logprobs is None else _logprob_count(logprobs),
        text or "",
        completion_tokens,
        prompt_tokens,
        get("finish_reason"),
        None,  # error
        cached_tokens,
    ))


class TokenCounter:
    """Tokens per event, best source first (docs/design.md: tokens per chunk).

    The record keeps the worst source any chunk needed, so one re-tokenized chunk flags
    the whole request as approximate instead of hiding among exact counts.
    """

    __slots__ = ("_count_text", "_last_completion", "source")

    def __init__(self, count_text: Callable[[str], int] | None = None) -> None:
        self._count_text = count_text
        self._last_completion = 0
        self.source = TokenSource.TOKEN_IDS

    def count(self, event: StreamEvent) -> int:
        cumulative = event.completion_tokens
        if cumulative is not None:
            delta = cumulative - self._last_completion
            self._last_completion = max(self._last_completion, cumulative)
        if not event.has_choice:
            return 0
        if event.token_ids is not None:
            return event.token_ids
        if cumulative is not None:
            return self._use(TokenSource.USAGE, max(delta, 0))
        if event.logprobs is not None:
            return self._use(TokenSource.LOGPROBS, event.logprobs)
        if not event.text:
            return 0
        count = self._count_text(event.text) if self._count_text else 1
        return self._use(TokenSource.TEXT, count)

    def _use(self, source: TokenSource, count: int) -> int:
        if count and _RANK[source] > _RANK[self.source]:
            self.source = source
        return count


_RANK = {TokenSource.TOKEN_IDS: 0, TokenSource.USAGE: 1, TokenSource.LOGPROBS: 2,
         TokenSource.TEXT: 3}
