"""Cases where real vLLM 0.32 was seen to differ from the simulator (notes/vllm_vs_sim.md).

Each test asserts vLLM's captured bytes or shape, so the simulator cannot drift back.
Setup as in the captures: model `tiny`, max_model_len 2048.
"""

from __future__ import annotations

from typing import Any

import orjson
from sim_helpers import SimFactory, fetch, sse_events

TINY = {"model": "tiny", "max_model_len": 2048, "spec_tokens": 3,
        "acceptance": (1.0, 1.0, 1.0)}


async def post(sim_factory: SimFactory, body: dict[str, Any],
               path: str = "/v1/completions") -> tuple[int, dict[str, str], bytes]:
    async with sim_factory(**TINY) as sim:
        return await fetch("POST", sim.base_url + path, json=body)


async def test_prompt_plus_max_tokens_over_context_is_cut_to_fit(
        sim_factory: SimFactory) -> None:
    body = {"model": "tiny", "prompt": list(range(10, 2010)), "max_tokens": 100,
            "ignore_eos": True}
    status, _, raw = await post(sim_factory, body)
    assert status == 200, raw
    got = orjson.loads(raw)
    assert got["choices"][0]["finish_reason"] == "length"
    usage = got["usage"]
    assert (usage["prompt_tokens"], usage["total_tokens"], usage["completion_tokens"]) == (
        2000, 2048, 48)


async def test_cut_to_fit_also_streams(sim_factory: SimFactory) -> None:
    body = {"model": "tiny", "prompt": list(range(10, 2010)), "max_tokens": 100,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    status, _, raw = await post(sim_factory, body)
    assert status == 200
    events = sse_events(raw)
    assert events[-3]["choices"][0]["finish_reason"] == "length"
    assert events[-2]["usage"]["completion_tokens"] == 48


async def test_prompt_alone_over_context_has_vllms_message(sim_factory: SimFactory) -> None:
    status, _, raw = await post(sim_factory, {"model": "tiny", "prompt": [7] * 2100,
                                              "max_tokens": 10})
    assert status == 400
    assert raw == (
        b'{"error":{"message":"This model\'s maximum context length is 2048 tokens. However, '
        b'your prompt contains 2100 input tokens, which exceeds this limit even without any '
        b'output tokens. Please reduce the length of the input prompt. (parameter=input_tokens,'
        b' value=2100)","type":"BadRequestError","param":"input_tokens","code":400}}')


async def test_missing_prompt_has_vllms_message(sim_factory: SimFactory) -> None:
    status, _, raw = await post(sim_factory, {"model": "tiny", "max_tokens": 4})
    assert status == 400
    assert raw == (b'{"error":{"message":"Either prompt or prompt_embeds must be provided and '
                   b'non-empty. (parameter=prompt)","type":"BadRequestError","param":"prompt",'
                   b'"code":400}}')
