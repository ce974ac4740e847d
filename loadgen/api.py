"""OpenAI wire shapes as vLLM speaks them: request bodies and one decoded stream event.

Bodies are serialized to bytes once, before a request's clock starts, so no JSON encoding
ever happens between `start_ns` and the bytes reaching the socket.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, NamedTuple, NotRequired, TypedDict

import orjson

from loadgen.records import TokenSource


# ---- wire shapes (what goes over the socket) -------------------------------------------
class StreamOptions(TypedDict):
    include_usage: bool
    continuous_usage_stats: NotRequired[bool]


class ChatMessage(TypedDict):
    role: str
    content: str


class CompletionRequest(TypedDict):
    model: str
    prompt: str
    stream: bool
    stream_options: StreamOptions
    max_tokens: int
    temperature: float
    seed: int
    ignore_eos: bool
    add_special_tokens: bool
    return_token_ids: NotRequired[bool]
    logprobs: NotRequired[int]


class ChatRequest(TypedDict):
    model: str
    messages: list[dict[str, Any]]
    stream: bool
    stream_options: StreamOptions
    max_tokens: int
    temperature: float
    seed: int
    ignore_eos: bool
    chat_template_kwargs: dict[str, Any]
    return_token_ids: NotRequired[bool]
    logprobs: NotRequired[bool]
    top_logprobs: NotRequired[int]


class Usage(TypedDict, total=False):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class ErrorBody(TypedDict, total=False):
    message: str
    type: str
    param: str | None
    code: int


class ModelCard(TypedDict, total=False):
    id: str
    object: str
    root: str
    max_model_len: int


class ModelList(TypedDict):
    object: str
    data: list[ModelCard]


class TokenizeResponse(TypedDict, total=False):
    count: int
    max_model_len: int
    tokens: list[int]


# ---- request bodies ----------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class BodyOptions:
    """Everything in a request body that is the same for every request of a run."""

    endpoint: str  # "completions" | "chat"
    model: str
    temperature: float = 0.0
    seed: int = 0
    thinking: str = "thinking"
    reasoning_effort: str | None = None
    return_token_ids: bool = True  # vLLM's exact per-chunk token ids
    continuous_usage: bool = True  # cumulative usage on every chunk
    logprobs: bool = False  # only when the server rejects both of the above

    @property
    def path(self) -> str:
        return "/v1/completions" if self.endpoint == "completions" else "/v1/chat/completions"


def _stream_options(options: BodyOptions) -> StreamOptions:
    stream_options: StreamOptions = {"include_usage": True}
    if options.continuous_usage:
        stream_options["continuous_usage_stats"] = True
    return stream_options


def completion_body(
    options: BodyOptions, prompt: str, max_tokens: int, seed: int | None = None
) -> CompletionRequest:
    """The encoded prompt string as is: loadgen already added BOS and the chat template.

    `seed` is per request (drawn from the run's seed): one shared seed would give every
    request the same sampling stream (and, on the simulator, the same acceptance draws).
    """
    body: CompletionRequest = {
        "model": options.model,
        "prompt": prompt,
        "stream": True,
        "stream_options": _stream_options(options),
        "max_tokens": max_tokens,
        "temperature": options.temperature,
        "seed": options.seed if seed is None else seed,
        "ignore_eos": True,
        "add_special_tokens": False,
    }
    if options.return_token_ids:
        body["return_token_ids"] = True
    if options.logprobs:
        body["logprobs"] = 0  # 0 alternatives: one entry per sampled token
    return body


def chat_body(
    options: BodyOptions,
    messages: Sequence[dict[str, Any]],
    max_tokens: int,
    seed: int | None = None,
) -> ChatRequest:
    """The server applies its chat template; thinking mode and effort go as template kwargs."""
    kwargs: dict[str, Any] = {"thinking": options.thinking == "thinking"}
    if options.reasoning_effort is not None:
        kwargs["reasoning_effort"] = options.reasoning_effort
    body: ChatRequest = {
        "model": options.model,
        "messages": list(messages),
        "stream": True,
        "stream_options": _stream_options(options),
        "max_tokens": max_tokens,
        "temperature": options.temperature,
        "seed": options.seed if seed is None else seed,
        "ignore_eos": True,
        "chat_template_kwargs": kwargs,
    }
    if options.return_token_ids:
        body["return_token_ids"] = True
    if options.logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = 0
    return body


def encode_body(body: CompletionRequest | ChatRequest) -> bytes:
    return orjson.dumps(body)


# ---- stream events ------------------------------------------------------------------------
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
    completion_tokens = prompt_tokens = None
    if isinstance(usage, dict):
        completion_tokens = usage.get("completion_tokens")
        prompt_tokens = usage.get("prompt_tokens")
    choices = get("choices")
    if not isinstance(choices, list):
        raise MalformedEvent(f"no choices list: {data[:120]!r}")
    if not choices:
        return StreamEvent(completion_tokens=completion_tokens, prompt_tokens=prompt_tokens)
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
    ))


class TokenCounter:
    """Tokens per event, best source first (DESIGN: tokens per chunk).

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
