"""Request bodies -> a validated Generation, or an ApiError carrying vLLM 0.32's error body.

Captured messages (fixtures/vllm_0.32_cpu/error_*.txt and notes/vllm_vs_sim.md) are
reproduced verbatim.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import orjson

from loadgen.sim.logprobs import MAX_LOGPROBS
from loadgen.sim.wire import StreamOptions, error_body


class ApiError(Exception):
    def __init__(
        self, status: int, message: str, kind: str = "BadRequestError", param: str | None = None
    ) -> None:
        super().__init__(message)
        self.status = status
        self.body = error_body(message, kind, param, status)


def bad_request(message: str, param: str | None = None, value: Any = None) -> ApiError:
    if param is not None:
        message = f"{message} (parameter={param}, value={value})"
    return ApiError(400, message, "BadRequestError", param)


@dataclass(frozen=True, slots=True)
class Generation:
    """What a /v1/completions or /v1/chat/completions request asks for."""

    chat: bool
    prompt_text: str | None  # None when the prompt came as token ids
    prompt_ids: list[int] | None  # set when given as ids; else filled after tokenization
    max_tokens: int | None
    max_tokens_param: str
    min_tokens: int
    ignore_eos: bool
    seed: int | None
    stream: bool
    options: StreamOptions
    add_special_tokens: bool
    logprobs: int | None = None  # alternatives per token; None = no logprobs


def parse_json(raw: bytes) -> dict[str, Any]:
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError:
        body = None
        message, position = "Expecting value", 0
        try:
            json.loads(raw)
        except json.JSONDecodeError as exc:  # FastAPI reports the stdlib parser's view
            message, position = exc.msg, exc.pos
        except UnicodeDecodeError:
            message = "Invalid UTF-8"
        detail = (
            f"1 validation error:\n  {{'type': 'json_invalid', 'loc': 'body.{position}', "
            f"'msg': 'JSON decode error', 'input': '<dict of 0 items>', "
            f"'ctx': {{'error': '{message}'}}}}"
        )
        raise ApiError(400, detail, "Bad Request", f"body.{position}") from None
    if not isinstance(body, dict):
        raise ApiError(400, "the request body must be a JSON object", "Bad Request", "body")
    return body


def check_model(body: dict[str, Any], served: str) -> None:
    model = body.get("model")
    if model is not None and model != served:
        raise ApiError(
            404,
            f"The model `{model}` does not exist. Valid aliases: {served}.",
            "NotFoundError",
            "model",
        )


def check_rejected(body: dict[str, Any], rejected: tuple[str, ...]) -> None:
    """--reject-params: 400 for vLLM extensions this simulated server pretends to lack."""
    if not rejected:
        return
    used: dict[str, Any] = {}
    if body.get("return_token_ids") is not None:
        used["return_token_ids"] = body["return_token_ids"]
    options = body.get("stream_options")
    if isinstance(options, dict) and options.get("continuous_usage_stats") is not None:
        used["continuous_usage_stats"] = options["continuous_usage_stats"]
    for name in rejected:
        if name in used:
            raise bad_request(f"Unrecognized request argument supplied: {name}", name, used[name])


def _int(body: dict[str, Any], name: str, default: int | None) -> int | None:
    value = body.get(name)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, int):
        raise bad_request(f"{name} must be an integer", name, value)
    return value


def _bool(body: dict[str, Any], name: str, default: bool) -> bool:
    value = body.get(name)
    if value is None:
        return default
    if not isinstance(value, bool):
        raise bad_request(f"{name} must be a boolean", name, value)
    return value


def stream_options(body: dict[str, Any], stream: bool) -> StreamOptions:
    raw = body.get("stream_options")
    return_ids = _bool(body, "return_token_ids", False)
    if raw is None:
        return StreamOptions(False, False, return_ids)
    if not stream:
        raise bad_request(
            "Stream options can only be defined when `stream=True`.", "stream_options", raw
        )
    if not isinstance(raw, dict):
        raise bad_request("stream_options must be an object", "stream_options", raw)
    include = _bool(raw, "include_usage", False)
    continuous = include and _bool(raw, "continuous_usage_stats", False)
    return StreamOptions(include, continuous, return_ids)


def missing_prompt() -> ApiError:
    """vLLM 0.32's words (captured): the parameter is named, no value given."""
    return ApiError(
        400,
        "Either prompt or prompt_embeds must be provided and non-empty. (parameter=prompt)",
        "BadRequestError",
        "prompt",
    )


def _completion_prompt(body: dict[str, Any]) -> tuple[str | None, list[int] | None]:
    prompt = body.get("prompt")
    if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str | list):
        prompt = prompt[0]  # a batch of one
    if prompt is None or prompt == "" or prompt == []:
        raise missing_prompt()
    if isinstance(prompt, str):
        return prompt, None
    if (
        isinstance(prompt, list)
        and prompt
        and all(isinstance(t, int) and not isinstance(t, bool) for t in prompt)
    ):
        return None, list(prompt)
    raise bad_request(
        "prompt must be a non-empty string or list of token ids "
        "(the simulator serves one prompt per request)",
        "prompt",
        type(prompt).__name__,
    )


def _logprobs(body: dict[str, Any], chat: bool) -> int | None:
    """Completions: `logprobs: N`; chat: `logprobs: true` plus `top_logprobs: N`."""
    if chat:
        top = _int(body, "top_logprobs", None)
        if not _bool(body, "logprobs", False):
            if top is not None:
                raise bad_request(
                    "when using `top_logprobs`, `logprobs` must be set to true.",
                    "top_logprobs",
                    top,
                )
            return None
        count, param = (top or 0), "top_logprobs"
    else:
        maybe = _int(body, "logprobs", None)
        if maybe is None:
            return None
        count, param = maybe, "logprobs"
    if count < 0:
        raise bad_request(f"{param} must be non-negative, got {count}.", param, count)
    if count > MAX_LOGPROBS:
        raise bad_request(
            f"Requested sample logprobs of {count}, which is greater than max "
            f"allowed: {MAX_LOGPROBS}",
            param,
            count,
        )
    return count


def parse_generation(body: dict[str, Any], *, chat: bool) -> Generation:
    """Everything except the prompt's tokenization and the length checks that need it."""
    if _int(body, "n", 1) != 1:
        raise bad_request("the simulator serves n=1 only", "n", body.get("n"))
    stream = _bool(body, "stream", False)
    param = "max_tokens"
    if chat and body.get("max_completion_tokens") is not None:
        param = "max_completion_tokens"
    max_tokens = _int(body, param, None)
    if max_tokens is not None and max_tokens < 1:
        raise bad_request(f"{param} must be at least 1, got {max_tokens}.", param, max_tokens)
    min_tokens = _int(body, "min_tokens", 0) or 0
    if min_tokens < 0:
        raise bad_request(
            f"min_tokens must be greater than or equal to 0, got {min_tokens}.",
            "min_tokens",
            min_tokens,
        )
    if max_tokens is not None and min_tokens > max_tokens:
        raise bad_request(
            f"min_tokens must be less than or equal to max_tokens={max_tokens}, got {min_tokens}.",
            "min_tokens",
            min_tokens,
        )
    prompt_text, prompt_ids = (None, None) if chat else _completion_prompt(body)
    return Generation(
        chat=chat,
        prompt_text=prompt_text,
        prompt_ids=prompt_ids,
        max_tokens=max_tokens,
        max_tokens_param=param,
        min_tokens=min_tokens,
        ignore_eos=_bool(body, "ignore_eos", False),
        seed=_int(body, "seed", None),
        stream=stream,
        options=stream_options(body, stream),
        add_special_tokens=_bool(body, "add_special_tokens", not chat),
        logprobs=_logprobs(body, chat),
    )


def check_lengths(gen: Generation, prompt_len: int, max_model_len: int) -> int:
    """The effective max_tokens, after vLLM 0.32's context-length checks.

    vLLM rejects max_tokens > max_model_len and a prompt that leaves no room for one
    output token; otherwise it silently lowers max_tokens to what fits (captured: a
    2000-token prompt with max_tokens 100 at max_model_len 2048 answers 200 with 48
    tokens, finish_reason "length").
    """
    requested = gen.max_tokens
    param = gen.max_tokens_param
    if requested is not None and requested > max_model_len:
        raise bad_request(
            f"{param}={requested} cannot be greater than max_model_len="
            f"{max_model_len}. Please request fewer output tokens.",
            param,
            requested,
        )
    if prompt_len >= max_model_len:
        raise bad_request(
            f"This model's maximum context length is {max_model_len} tokens. However, your "
            f"prompt contains {prompt_len} input tokens, which exceeds this limit even "
            "without any output tokens. Please reduce the length of the input prompt.",
            "input_tokens",
            prompt_len,
        )
    room = max_model_len - prompt_len
    return room if requested is None else min(requested, room)


def check_token_ids(ids: list[int], vocab_size: int) -> None:
    for token in ids:
        if not 0 <= token < vocab_size:
            raise bad_request(f"Token id {token} is out of vocabulary", "prompt", token)


def chat_template_args(body: dict[str, Any]) -> tuple[str, str | None]:
    """(thinking_mode, reasoning_effort) from chat_template_kwargs."""
    kwargs = body.get("chat_template_kwargs") or {}
    if not isinstance(kwargs, dict):
        raise bad_request("chat_template_kwargs must be an object", "chat_template_kwargs", kwargs)
    thinking = kwargs.get("thinking", kwargs.get("enable_thinking", False))
    effort = kwargs.get("reasoning_effort", body.get("reasoning_effort"))
    if effort is not None and not isinstance(effort, str):
        raise bad_request("reasoning_effort must be a string", "reasoning_effort", effort)
    return ("thinking" if thinking else "chat"), effort


_TRUE = frozenset({"1", "true", "t", "yes", "y", "on"})
_FALSE = frozenset({"0", "false", "f", "no", "n", "off"})


def query_bool(text: str | None, name: str) -> bool:
    """A boolean query parameter as FastAPI reads one (absent: false)."""
    if text is None:
        return False
    if text.lower() in _TRUE | _FALSE:
        return text.lower() in _TRUE
    raise bad_request("Input should be a valid boolean", name, text)
