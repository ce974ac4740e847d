"""vLLM 0.32's exact wire bytes: stream chunks, usage, non-stream bodies, error bodies.

Field names and their order follow the captures in fixtures/vllm_0.32_cpu/. Stream chunks
are assembled from pre-encoded byte prefixes so a chunk costs two small orjson calls.
Observed shapes worth knowing:
- completions chunks always carry "stop_reason", "prompt_token_ids" (the prompt ids on
  the first chunk with return_token_ids, else null) and "token_ids" (null without
  return_token_ids); continuous usage has no "completion_tokens_details".
- chat: the first chunk is role-only with content "" and carries the top-level
  "prompt_token_ids"/"prompt_text"; content chunks add "stop_reason" only on the last one;
  continuous usage there has "completion_tokens_details": null.
- the final usage-only chunk has "choices": [] and "system_fingerprint"; without
  include_usage, the completions chunk carrying finish_reason has "system_fingerprint".
- every SSE event is its own HTTP/1.1 chunk (vLLM never coalesces two events in one).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, TypedDict

import orjson

from loadgen.sim.logprobs import LogprobsBuilder

VLLM_VERSION = "0.32.0"
DONE_EVENT = b"data: [DONE]\n\n"
NULL = b"null"


class ErrorDetail(TypedDict):
    message: str
    type: str
    param: str | None
    code: int


class ErrorBody(TypedDict):
    error: ErrorDetail


def error_body(message: str, kind: str, param: str | None, code: int) -> bytes:
    body: ErrorBody = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return orjson.dumps(body)


def sse(payload: bytes) -> bytes:
    return b"data: " + payload + b"\n\n"


def http_chunk(payload: bytes) -> bytes:
    """One HTTP/1.1 chunked-transfer frame (what aiohttp writes for a streamed body)."""
    return b"%x\r\n%b\r\n" % (len(payload), payload)


@dataclass(frozen=True, slots=True)
class StreamOptions:
    include_usage: bool
    continuous_usage: bool
    return_token_ids: bool


def _usage(prompt: int, completion: int, details: bool) -> bytes:
    tail = b',"completion_tokens_details":null}' if details else b"}"
    return b'"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d%b' % (
        prompt,
        prompt + completion,
        completion,
        tail,
    )


class StreamFormat:
    """Builds one request's SSE events (chat or completions)."""

    __slots__ = (
        "_chat",
        "_fingerprint",
        "_head",
        "_logprobs",
        "_mid_ids",
        "_mid_pre",
        "_mid_tail",
        "_opts",
        "_prompt_ids",
        "_prompt_len",
        "_reasoning_key",
        "_reasoning_pre",
        "plain",
    )

    def __init__(
        self,
        *,
        chat: bool,
        request_id: str,
        created: int,
        model: str,
        prompt_ids: list[int],
        opts: StreamOptions,
        fingerprint: str,
        logprobs: LogprobsBuilder | None = None,
        reasoning_field: str | None = None,
    ) -> None:
        self._chat = chat
        # A thinking chat request behind a reasoning parser (sim/thinking.py): the field
        # its reasoning deltas go under (None: everything is content)
        self._reasoning_key = None if reasoning_field is None else orjson.dumps(reasoning_field)
        self._logprobs = logprobs
        # middle_frame (the hot path) serves only chunks without logprobs.
        self.plain = logprobs is None
        self._opts = opts
        self._prompt_ids = prompt_ids
        self._prompt_len = len(prompt_ids)
        self._fingerprint = fingerprint
        kind = "chat.completion.chunk" if chat else "text_completion"
        self._head = b'{"id":%b,"object":"%b","created":%d,"model":%b,"choices":' % (
            orjson.dumps(request_id),
            kind.encode(),
            created,
            orjson.dumps(model),
        )
        # Pieces of a middle chunk (neither first nor last): the hot path, built once.
        if chat:
            self._mid_pre = b"data: " + self._head + b'[{"index":0,"delta":{"content":'
            self._mid_ids = b'},"logprobs":null,"finish_reason":null,"token_ids":'
        else:
            self._mid_pre = b"data: " + self._head + b'[{"index":0,"text":'
            self._mid_ids = (
                b',"logprobs":null,"finish_reason":null,"stop_reason":null,'
                b'"prompt_token_ids":null,"token_ids":'
            )
        self._mid_tail = b"}]}\n\n"
        self._reasoning_pre = (
            b""
            if self._reasoning_key is None
            else b"data: " + self._head + b'[{"index":0,"delta":{' + self._reasoning_key + b":"
        )

    @property
    def chat(self) -> bool:
        return self._chat

    @property
    def parses_reasoning(self) -> bool:
        return self._reasoning_key is not None

    def role_event(self) -> bytes:
        """Chat's first event: role only, content ""."""
        parts = [
            self._head,
            b'[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,'
            b'"finish_reason":null}]',
        ]
        if self._opts.continuous_usage:
            parts.append(b"," + _usage(self._prompt_len, 0, details=True))
        ids = orjson.dumps(self._prompt_ids) if self._opts.return_token_ids else NULL
        parts.append(b',"prompt_token_ids":%b,"prompt_text":null}' % ids)
        return sse(b"".join(parts))

    def content_event(
        self,
        ids: list[int],
        texts: Sequence[str],
        completion_tokens: int,
        finish: str | None,
        first: bool,
        split: tuple[str, str | None] | None = None,
    ) -> bytes:
        """A content event for tokens `ids` whose streamed texts are `texts`; `split`, a
        thinking chat request's chunk as its reasoning parser splits it: (reasoning, the
        content or None), the reasoning under the reasoning field."""
        opts = self._opts
        text = orjson.dumps("".join(texts) if split is None else split[1] or "")
        token_ids = orjson.dumps(ids) if opts.return_token_ids else NULL
        finish_json = b'"%b"' % finish.encode() if finish else NULL
        logprobs = self._logprobs.chunk(ids, texts) if self._logprobs is not None else NULL
        if self._chat:
            stop = b',"stop_reason":null' if finish else b""
            delta = b'"content":%b' % text
            if split is not None and self._reasoning_key is not None:
                reasoning, content = split
                said = b"%b:%b" % (self._reasoning_key, orjson.dumps(reasoning))
                delta = said + (b"," + delta if content is not None else b"")
            body = (
                b'[{"index":0,"delta":{%b},"logprobs":%b,"finish_reason":%b%b,'
                b'"token_ids":%b}]' % (delta, logprobs, finish_json, stop, token_ids)
            )
        else:
            prompt_ids = orjson.dumps(self._prompt_ids) if first and opts.return_token_ids else NULL
            body = (
                b'[{"index":0,"text":%b,"logprobs":%b,"finish_reason":%b,'
                b'"stop_reason":null,"prompt_token_ids":%b,"token_ids":%b}]'
                % (text, logprobs, finish_json, prompt_ids, token_ids)
            )
        if opts.continuous_usage:
            body += b"," + _usage(self._prompt_len, completion_tokens, details=self._chat)
        elif finish and not opts.include_usage and not self._chat:
            # Captured: without include_usage the fingerprint rides on the finishing chunk.
            body += b',"system_fingerprint":%b' % orjson.dumps(self._fingerprint)
        return sse(self._head + body + b"}")

    def middle_frame(
        self, ids: list[int], text: str, completion_tokens: int, reasoning: bool = False
    ) -> bytes:
        """content_event(first=False, finish=None), already framed as an HTTP chunk;
        `reasoning`: the text goes under the reasoning field instead of content."""
        opts = self._opts
        token_ids = orjson.dumps(ids) if opts.return_token_ids else NULL
        if opts.continuous_usage:
            tail = b"}]," + _usage(self._prompt_len, completion_tokens, self._chat) + b"}\n\n"
        else:
            tail = self._mid_tail
        pre = self._reasoning_pre if reasoning else self._mid_pre
        payload = pre + orjson.dumps(text) + self._mid_ids + token_ids + tail
        return b"%x\r\n%b\r\n" % (len(payload), payload)

    def final_events(
        self,
        completion_tokens: int,
        cached_tokens: int | None = None,
        metrics: bytes | None = None,
        sglext: bytes | None = None,
    ) -> tuple[bytes, ...]:
        """The usage-only event (with include_usage) and [DONE], each to be its own chunk.

        `cached_tokens` (vLLM's --enable-prompt-tokens-details) rides on the final usage
        only, as in vLLM: continuous usage chunks never carry it; so does vLLM 0.32's
        per-request `metrics` (after system_fingerprint, its field order), and only there.
        """
        if not self._opts.include_usage:
            return (DONE_EVENT,)
        usage = _usage(self._prompt_len, completion_tokens, details=False)
        if cached_tokens is not None:
            usage = usage[:-1] + b',"prompt_tokens_details":{"cached_tokens":%d}}' % cached_tokens
        tail = b',"system_fingerprint":%b' % orjson.dumps(self._fingerprint)
        tail += (b',"metrics":%b' % metrics) if metrics is not None else b""
        tail += (b',"sglext":%b}' % sglext) if sglext is not None else b"}"
        return sse(self._head + b"[]," + usage + tail), DONE_EVENT


def malformed_event(request_id: str) -> bytes:
    """A chunk cut off mid-JSON, as a broken proxy or server might send."""
    return sse(
        b'{"id":%b,"object":"text_completion","choices":[{"index":0,"text":'
        % orjson.dumps(request_id)
    )


def usage_dict(prompt: int, completion: int, cached: int | None = None) -> dict[str, Any]:
    details = None if cached is None else {"cached_tokens": cached}
    return {
        "prompt_tokens": prompt,
        "total_tokens": prompt + completion,
        "completion_tokens": completion,
        "prompt_tokens_details": details,
        "completion_tokens_details": None,
    }


@dataclass(frozen=True, slots=True)
class Outcome:
    """What a finished request produced, for non-stream bodies."""

    request_id: str
    created: int
    model: str
    fingerprint: str
    prompt_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: str
    return_token_ids: bool
    logprobs: dict[str, Any] | None = None
    cached_tokens: int | None = None  # with --enable-prompt-tokens-details
    metrics: dict[str, Any] | None = None  # vLLM 0.32's per-request metrics, when enabled


def completion_body(o: Outcome) -> bytes:
    choice = {
        "index": 0,
        "text": o.text,
        "logprobs": o.logprobs,
        "finish_reason": o.finish_reason,
        "stop_reason": None,
        "token_ids": o.token_ids if o.return_token_ids else None,
        "prompt_logprobs": None,
        "prompt_token_ids": o.prompt_ids if o.return_token_ids else None,
        "routed_experts": None,
    }
    return orjson.dumps(
        {
            "id": o.request_id,
            "object": "text_completion",
            "created": o.created,
            "model": o.model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": o.fingerprint,
            "usage": usage_dict(len(o.prompt_ids), len(o.token_ids), o.cached_tokens),
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": o.metrics,
        }
    )


def chat_body(o: Outcome) -> bytes:
    message = {
        "role": "assistant",
        "content": o.text,
        "refusal": None,
        "annotations": None,
        "audio": None,
        "function_call": None,
        "reasoning": None,
    }
    choice = {
        "index": 0,
        "message": message,
        "logprobs": o.logprobs,
        "finish_reason": o.finish_reason,
        "stop_reason": None,
        "token_ids": o.token_ids if o.return_token_ids else None,
        "routed_experts": None,
    }
    return orjson.dumps(
        {
            "id": o.request_id,
            "object": "chat.completion",
            "created": o.created,
            "model": o.model,
            "choices": [choice],
            "service_tier": None,
            "system_fingerprint": o.fingerprint,
            "usage": usage_dict(len(o.prompt_ids), len(o.token_ids), o.cached_tokens),
            "prompt_logprobs": None,
            "prompt_token_ids": o.prompt_ids if o.return_token_ids else None,
            "prompt_text": None,
            "kv_transfer_params": None,
            "ec_transfer_params": None,
            "metrics": o.metrics,
        }
    )


def models_body(model: str, root: str, max_model_len: int, created: int, perm_id: str) -> bytes:
    permission = {
        "id": perm_id,
        "object": "model_permission",
        "created": created,
        "allow_create_engine": False,
        "allow_sampling": True,
        "allow_logprobs": True,
        "allow_search_indices": False,
        "allow_view": True,
        "allow_fine_tuning": False,
        "organization": "*",
        "group": None,
        "is_blocking": False,
    }
    card = {
        "id": model,
        "object": "model",
        "created": created,
        "owned_by": "vllm",
        "root": root,
        "parent": None,
        "max_model_len": max_model_len,
        "permission": [permission],
    }
    return orjson.dumps({"object": "list", "data": [card]})


def version_body() -> bytes:
    return orjson.dumps({"version": VLLM_VERSION})


def tokenize_body(tokens: list[int], max_model_len: int) -> bytes:
    return orjson.dumps(
        {"count": len(tokens), "max_model_len": max_model_len, "tokens": tokens, "token_strs": None}
    )


def detokenize_body(text: str) -> bytes:
    return orjson.dumps({"prompt": text})
