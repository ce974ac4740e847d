"""The simulator thinks: a thinking request reasons for a drawn number of tokens, ends the
reasoning with DeepSeek-V4's `</think>` (id 128822), then answers.

Which requests think: chat with `chat_template_kwargs.thinking` (the effort from its
`reasoning_effort`, else high), completions whose prompt ends with `<think>` (the effort
from the encoder's effort prefix in the prompt). How long: geometric with the effort's
mean (`--reasoning-lengths`), from its own stream of the request's seed, so the tokens,
acceptance and EOS draws are the same as without thinking. The reasoning length counts
the tokens before `</think>`; the end token closes the reasoning; the answer follows.

On the wire: completions stream the text as generated, `</think>` included (no parser,
as vLLM); chat with `--reasoning-parser` streams the reasoning under the engine's field
(vLLM 0.32 `reasoning`, SGLang `reasoning_content`) and the answer as `content`, the
end token's text dropped, a step across the boundary as one delta with both, as vLLM's
DeepSeek parsers do; chat without a parser streams everything as content.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from encoders.deepseek_v4 import THINK_OPEN
from encoders.dsv4_texts import REASONING_EFFORT_PREFIXES
from loadgen.sim.validate import chat_template_args

THINK_END_ID = 128822  # DeepSeek-V4's `</think>` (loadgen/tokenizer.py DSV4_SPECIAL_IDS)
THINK_END_TEXT = "</think>"
# vLLM's parser names the simulator answers to (all modelled as DeepSeek's)
REASONING_PARSERS = ("deepseek_v4", "deepseek_r1", "deepseek_v3", "qwen3")
EFFORTS = ("low", "high", "max")
DEFAULT_EFFORT = "high"  # DeepSeek-V4's thinking mode without an effort prefix
# The engine dialect's field for streamed reasoning (sim/dialects.py names)
REASONING_FIELDS: Mapping[str, str] = {"vllm": "reasoning", "sglang": "reasoning_content"}
DEFAULT_REASONING_FIELD = "reasoning_content"


def reasoning_field(engine: str) -> str:
    return REASONING_FIELDS.get(engine, DEFAULT_REASONING_FIELD)


def request_effort(body: dict[str, Any], chat: bool, prompt_text: str | None) -> str | None:
    """The effort a request thinks at; None when it does not think."""
    if chat:
        mode, effort = chat_template_args(body)
        if mode != "thinking":
            return None
        return effort if effort in EFFORTS else DEFAULT_EFFORT
    if prompt_text is None or not prompt_text.endswith(THINK_OPEN):
        return None
    for effort in ("max", "high"):  # the ones with a prefix of their own
        if REASONING_EFFORT_PREFIXES[effort] in prompt_text:
            return effort
    return DEFAULT_EFFORT


def draw_reasoning_length(seed_sequence: np.random.SeedSequence, mean: int) -> int:
    """Tokens before `</think>`: geometric with this mean (at least 1)."""
    if mean <= 1:
        return 1
    return int(np.random.default_rng(seed_sequence).geometric(1.0 / mean))


def split_texts(
    texts: Sequence[str], start: int, end: int, boundary: int | None
) -> tuple[str, str | None] | None:
    """How a reasoning parser splits the chunk of output tokens [start, end) whose texts
    are `texts`, `</think>` being token `boundary` (None: never, the reasoning runs to
    the end): (reasoning, content or None); None when the chunk is all answer. The end
    token's text is dropped, as the parser swallows it."""
    if boundary is not None and start > boundary:
        return None
    if boundary is None or end <= boundary:
        return "".join(texts), None
    cut = boundary - start
    content = "".join(texts[cut + 1 :])
    # vLLM's DeepSeek parsers send no content field for an empty one
    return "".join(texts[:cut]), content or None
