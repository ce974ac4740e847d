"""OpenAI request bodies as vLLM reads them (wire shapes are TypedDicts), built by the
endpoint's request builder (`Completions` or `Chat`, picked once by `request_builder`).

Bodies are serialized to bytes once, when a point is planned, so no JSON encoding ever
happens between a request's `start_ns` and its bytes reaching the socket.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from types import MappingProxyType
from typing import Any, ClassVar, NotRequired, TypedDict, cast

import orjson

from loadgen.workload.reply import ReplyText, chat_message, completion_message


class StreamOptions(TypedDict):
    include_usage: bool
    continuous_usage_stats: NotRequired[bool]


class CompletionRequest(TypedDict):
    model: str
    prompt: str
    stream: bool
    stream_options: StreamOptions
    max_tokens: int
    temperature: float
    top_p: NotRequired[float]
    seed: int
    ignore_eos: NotRequired[bool]
    add_special_tokens: NotRequired[bool]
    return_token_ids: NotRequired[bool]
    logprobs: NotRequired[int]


class ChatRequest(TypedDict):
    model: str
    messages: list[dict[str, Any]]
    stream: bool
    stream_options: StreamOptions
    max_tokens: int
    temperature: float
    top_p: NotRequired[float]
    seed: int
    ignore_eos: NotRequired[bool]
    chat_template_kwargs: NotRequired[dict[str, Any]]
    return_token_ids: NotRequired[bool]
    logprobs: NotRequired[bool]
    top_logprobs: NotRequired[int]


# The fields loadgen sends beyond the OpenAI schema (vLLM's extensions), by the name a
# server that refuses one gives it, and what a run sent without it loses. A field an
# engine dialect adds (metrics/engines.py request_body) is one too. The preflight
# (client/preflight.py) drops one that the server refuses by name and records why.
TOKEN_IDS, CONTINUOUS_USAGE = "return_token_ids", "continuous_usage_stats"
EXTENSIONS: Mapping[str, str] = MappingProxyType(
    {
        TOKEN_IDS: "per-chunk token counts come from the token source in server.token_source "
        "instead of the exact token ids",
        CONTINUOUS_USAGE: "per-chunk token counts come from the token source in "
        "server.token_source instead of cumulative usage",
        "add_special_tokens": "the server adds special tokens to the prompt as its tokenizer's "
        "default says (loadgen's prompts already carry BOS and the chat template): input "
        "lengths are loadgen's count of the prompt sent; the server's own count is each "
        "record's prompt_tokens",
        "ignore_eos": "a request may end before --osl at the model's end of sequence: output "
        "lengths are what each stream carried (each record's completion_tokens)",
        "chat_template_kwargs": "the server renders its chat template with its own defaults "
        "(--thinking and --reasoning-effort are not passed)",
    }
)


@dataclass(frozen=True, slots=True)
class BodyOptions:
    """Everything in a request body that is the same for every request of a run."""

    endpoint: str  # "completions" | "chat"
    model: str
    temperature: float = 0.0
    top_p: float | None = None  # None: not sent
    seed: int = 0
    thinking: str = "thinking"
    reasoning_effort: str | None = None
    return_token_ids: bool = True  # vLLM's exact per-chunk token ids
    continuous_usage: bool = True  # cumulative usage on every chunk
    logprobs: bool = False  # only when the server rejects both of the above
    # --extra-body: merged into every body; RunSpec has already refused the fields above.
    extra_body: Mapping[str, Any] = field(default_factory=dict)
    # extensions (EXTENSIONS, or an engine's request fields in extra_body) the server
    # refused by name: left out of every body
    omit: tuple[str, ...] = ()

    def without(self, names: Iterable[str]) -> BodyOptions:
        """These options with the named extensions left out: the two token sources turned
        off, any other field omitted."""
        refused = set(names)
        return replace(
            self,
            return_token_ids=self.return_token_ids and TOKEN_IDS not in refused,
            continuous_usage=self.continuous_usage and CONTINUOUS_USAGE not in refused,
            omit=tuple(sorted({*self.omit, *(refused - {TOKEN_IDS, CONTINUOUS_USAGE})})),
        )

    def sends(self, name: str) -> bool:
        """Whether bodies built with these options carry the extension `name`."""
        if name == TOKEN_IDS:
            return self.return_token_ids
        if name == CONTINUOUS_USAGE:
            return self.continuous_usage
        return name not in self.omit

    @property
    def builder(self) -> RequestBuilder:
        """The endpoint's request builder (not a field: the options' JSON stays as it is)."""
        return request_builder(self.endpoint)

    @property
    def path(self) -> str:
        return self.builder.path


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
    }
    if options.sends("ignore_eos"):
        body["ignore_eos"] = True
    if options.sends("add_special_tokens"):
        body["add_special_tokens"] = False
    if options.top_p is not None:
        body["top_p"] = options.top_p
    if options.return_token_ids:
        body["return_token_ids"] = True
    if options.logprobs:
        body["logprobs"] = 0  # 0 alternatives: one entry per sampled token
    _extra(body, options)
    return body


def _extra(body: CompletionRequest | ChatRequest, options: BodyOptions) -> None:
    cast(dict[str, Any], body).update(
        (name, value) for name, value in options.extra_body.items() if name not in options.omit
    )


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
    }
    if options.sends("ignore_eos"):
        body["ignore_eos"] = True
    if options.sends("chat_template_kwargs"):
        body["chat_template_kwargs"] = kwargs
    if options.top_p is not None:
        body["top_p"] = options.top_p
    if options.return_token_ids:
        body["return_token_ids"] = True
    if options.logprobs:
        body["logprobs"] = True
        body["top_logprobs"] = 0
    _extra(body, options)
    return body


def encode_body(body: CompletionRequest | ChatRequest) -> bytes:
    return orjson.dumps(body)


@dataclass(frozen=True, slots=True)
class Completions:
    """/v1/completions: the prompt as loadgen encoded it (chat template and BOS included),
    and a reply back into history as the encoder parses the raw text."""

    name: ClassVar[str] = "completions"
    path: ClassVar[str] = "/v1/completions"

    def body(
        self,
        options: BodyOptions,
        *,
        text: str,
        messages: Sequence[Mapping[str, Any]],
        max_tokens: int,
        seed: int | None = None,
    ) -> bytes:
        """The request's bytes from its encoded `text` (`messages` are chat's)."""
        return encode_body(completion_body(options, text, max_tokens, seed))

    def history_message(self, reply: ReplyText, encoder: str, thinking: str) -> dict[str, Any]:
        return completion_message(reply, encoder, thinking)


@dataclass(frozen=True, slots=True)
class Chat:
    """/v1/chat/completions: the messages, templated by the server; a reply back into
    history as a chat client sends it (content, and reasoning apart)."""

    name: ClassVar[str] = "chat"
    path: ClassVar[str] = "/v1/chat/completions"

    def body(
        self,
        options: BodyOptions,
        *,
        text: str,
        messages: Sequence[Mapping[str, Any]],
        max_tokens: int,
        seed: int | None = None,
    ) -> bytes:
        """The request's bytes from its `messages` (`text` is completions')."""
        return encode_body(chat_body(options, [dict(m) for m in messages], max_tokens, seed))

    def history_message(self, reply: ReplyText, encoder: str, thinking: str) -> dict[str, Any]:
        return chat_message(reply)


RequestBuilder = Completions | Chat
_BUILDERS: dict[str, RequestBuilder] = {Completions.name: Completions(), Chat.name: Chat()}


def request_builder(endpoint: str) -> RequestBuilder:
    """The builder of `--endpoint` (RunSpec allows completions and chat): the one place
    that asks which endpoint a run sends to."""
    try:
        return _BUILDERS[endpoint]
    except KeyError:
        raise ValueError(f"endpoint {endpoint!r}: allowed: completions, chat") from None
