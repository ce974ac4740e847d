"""The official openai client against the simulator: exact usage and exact text."""

from __future__ import annotations

from typing import Any

from openai import AsyncOpenAI
from tokenizers import Tokenizer

from encoders.deepseek_v4 import encode_messages
from loadgen.sim.server import RunningSimulator
from loadgen.tokenizer import decode, encode

PROMPT = "Explain continuous batching in one paragraph, please."
MESSAGES: list[Any] = [
    {"role": "system", "content": "Be brief."},
    {"role": "user", "content": PROMPT},
]
EXTRA = {"ignore_eos": True, "return_token_ids": True}


def client(sim: RunningSimulator) -> AsyncOpenAI:
    return AsyncOpenAI(base_url=sim.base_url + "/v1", api_key="unused", max_retries=0)


async def test_completions_stream(sim: RunningSimulator, tokenizer: Tokenizer) -> None:
    async with client(sim) as api:
        stream = await api.completions.create(
            model=sim.config.model,
            prompt=PROMPT,
            max_tokens=40,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=EXTRA,
        )
        texts: list[str] = []
        ids: list[int] = []
        usage, finish = None, None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                texts.append(choice.text)
                ids.extend(getattr(choice, "token_ids", None) or [])
                finish = choice.finish_reason or finish
    assert usage is not None
    assert usage.prompt_tokens == len(encode(tokenizer, PROMPT))
    assert usage.completion_tokens == 40 == len(ids)
    assert usage.total_tokens == usage.prompt_tokens + 40
    assert "".join(texts) == decode(tokenizer, ids)
    assert finish == "length"


async def test_completions_non_stream(sim: RunningSimulator, tokenizer: Tokenizer) -> None:
    async with client(sim) as api:
        result = await api.completions.create(
            model=sim.config.model, prompt=PROMPT, max_tokens=33, extra_body=EXTRA
        )
    assert result.usage is not None
    assert result.usage.prompt_tokens == len(encode(tokenizer, PROMPT))
    assert result.usage.completion_tokens == 33
    ids = result.choices[0].token_ids  # type: ignore[attr-defined]
    assert len(ids) == 33 and result.choices[0].text == decode(tokenizer, ids)


async def test_chat_stream(sim: RunningSimulator, tokenizer: Tokenizer) -> None:
    prompt_tokens = len(encode(tokenizer, encode_messages(MESSAGES, "chat")))
    async with client(sim) as api:
        stream = await api.chat.completions.create(
            model=sim.config.model,
            messages=MESSAGES,
            max_tokens=25,
            stream=True,
            stream_options={"include_usage": True},
            extra_body=EXTRA,
        )
        roles: list[str] = []
        texts: list[str] = []
        ids: list[int] = []
        usage = None
        async for chunk in stream:
            if chunk.usage is not None:
                usage = chunk.usage
            for choice in chunk.choices:
                if choice.delta.role:
                    roles.append(choice.delta.role)
                texts.append(choice.delta.content or "")
                ids.extend(getattr(choice, "token_ids", None) or [])
    assert roles == ["assistant"]
    assert usage is not None and usage.prompt_tokens == prompt_tokens
    assert usage.completion_tokens == 25 == len(ids)
    assert "".join(texts) == decode(tokenizer, ids)


async def test_chat_non_stream_with_thinking(sim: RunningSimulator, tokenizer: Tokenizer) -> None:
    text = encode_messages(MESSAGES, "thinking", reasoning_effort="high")
    async with client(sim) as api:
        result = await api.chat.completions.create(
            model=sim.config.model,
            messages=MESSAGES,
            max_tokens=12,
            extra_body={
                **EXTRA,
                "chat_template_kwargs": {"thinking": True, "reasoning_effort": "high"},
            },
        )
    assert result.usage is not None
    assert result.usage.prompt_tokens == len(encode(tokenizer, text))
    assert result.usage.completion_tokens == 12
    ids = result.choices[0].token_ids  # type: ignore[attr-defined]
    assert result.choices[0].message.content == decode(tokenizer, ids)
