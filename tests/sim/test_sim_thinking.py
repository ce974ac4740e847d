"""The simulator thinks (sim/thinking.py): what a thinking request streams, per endpoint and
engine dialect, and that a request that does not think streams what it always did."""

from __future__ import annotations

from typing import Any

import aiohttp
import pytest

from loadgen.sim.thinking import THINK_END_ID, split_texts
from tests.support.sim_helpers import SimFactory, chunk_token_ids, post_stream

MESSAGES = [{"role": "user", "content": "Think first, then answer."}]


def _chat(thinking: bool, seed: int = 3) -> dict[str, Any]:
    return {
        "messages": MESSAGES,
        "max_tokens": 120,
        "seed": seed,
        "ignore_eos": True,
        "return_token_ids": True,
        "stream_options": {"include_usage": True},
        "chat_template_kwargs": {"thinking": thinking, "reasoning_effort": "high"},
    }


def _deltas(events: list[Any]) -> list[dict[str, Any]]:
    return [
        e["choices"][0]["delta"]
        for e in events
        if e != "[DONE]" and e["choices"] and e["choices"][0].get("token_ids")
    ]


@pytest.mark.parametrize(
    ("engine", "field"), [("vllm", "reasoning"), ("sglang", "reasoning_content")]
)
async def test_a_parsed_thinking_stream_is_reasoning_then_content(
    sim_factory: SimFactory, engine: str, field: str
) -> None:
    async with (
        sim_factory(
            engine=engine, reasoning_parser="deepseek_v4", reasoning_lengths=(("high", 30),)
        ) as sim,
        aiohttp.ClientSession() as session,
    ):
        events = await post_stream(session, sim.base_url + "/v1/chat/completions", _chat(True))
    ids = [i for chunk in chunk_token_ids(events) for i in chunk]
    assert ids.count(THINK_END_ID) == 1
    boundary = ids.index(THINK_END_ID)
    kinds = []
    for delta in _deltas(events):
        kinds.append((field in delta, "content" in delta))
        assert "</think>" not in delta.get(field, "") + (delta.get("content") or "")
    # reasoning first, then (perhaps one delta with both) content only
    first_content = next(i for i, (_, content) in enumerate(kinds) if content)
    assert all(reasoning and not content for reasoning, content in kinds[:first_content])
    assert all(not reasoning for reasoning, _ in kinds[first_content + 1 :])
    assert 0 < boundary < len(ids) - 1


async def test_without_a_parser_the_reasoning_streams_as_content(sim_factory: SimFactory) -> None:
    async with (
        sim_factory(reasoning_lengths=(("high", 30),)) as sim,
        aiohttp.ClientSession() as session,
    ):
        events = await post_stream(session, sim.base_url + "/v1/chat/completions", _chat(True))
    deltas = _deltas(events)
    assert all(set(delta) <= {"content", "role"} for delta in deltas)
    assert "</think>" in "".join(delta.get("content") or "" for delta in deltas)


async def test_a_request_that_does_not_think_is_unchanged(sim_factory: SimFactory) -> None:
    """The thinking flags change nothing for it: the same ids, chunk by chunk."""
    streams = []
    for fields in ({}, {"reasoning_parser": "deepseek_v4", "reasoning_lengths": (("high", 30),)}):
        async with sim_factory(**fields) as sim, aiohttp.ClientSession() as session:
            streams.append(
                chunk_token_ids(
                    await post_stream(session, sim.base_url + "/v1/chat/completions", _chat(False))
                )
            )
    assert streams[0] == streams[1]
    assert THINK_END_ID not in [i for chunk in streams[0] for i in chunk]


def test_split_texts_drops_the_end_token_and_splits_around_it() -> None:
    texts = ["a", "b", "</think>", "c", "d"]
    assert split_texts(texts[:2], 0, 2, 2) == ("ab", None)  # all reasoning
    assert split_texts(texts[2:], 2, 5, 2) == ("", "cd")  # the end token, then the answer
    assert split_texts(texts[1:3], 1, 3, 2) == ("b", None)  # ends with the end token
    assert split_texts(texts[3:], 3, 5, 2) is None  # all answer
    assert split_texts(texts, 0, 5, None) == ("ab</think>cd", None)  # never ends
