"""`loadgen sim --answers FILE --answer-rate R`: an answer oracle, a TEST AID, not engine
behaviour. It gives loadgen's accuracy path (--accuracy gsm8k) ground truth without a
real model.

FILE is GSM8K-format JSONL (`question`, `answer` ending `#### N`). Of its questions,
exactly round(R x n) are answered correctly, which ones drawn from the simulator's
--seed; a request whose prompt asks one of them (its last `Question: ...` turn, as
loadgen renders GSM8K) gets `#### N`, a correct one the gold number, a wrong one the gold
with a 1 appended (after `</think>` when a DeepSeek-V4 completions prompt opened
thinking). Any other request is generated as usual.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import orjson

from encoders.deepseek_v4 import THINK_CLOSE, THINK_OPEN
from loadgen.sim.config import ConfigError

_ASKED = re.compile(r"Question: (.*?)\nEnd your response with the answer", re.DOTALL)


@dataclass(frozen=True, slots=True)
class Answers:
    """Question text -> the reply the oracle streams for it."""

    replies: dict[str, str]

    def reply(self, body: dict[str, Any], chat: bool) -> str | None:
        """The scripted reply for this request's question, or None (not one of FILE's)."""
        prompt: object = body.get("prompt")
        if chat:
            messages = body.get("messages")
            last = messages[-1] if isinstance(messages, list) and messages else None
            prompt = last.get("content") if isinstance(last, dict) else None
        if not isinstance(prompt, str):
            return None
        asked = _ASKED.findall(prompt)
        reply = self.replies.get(asked[-1]) if asked else None
        if reply is not None and not chat and prompt.endswith(THINK_OPEN):
            # a DeepSeek-V4 prompt in thinking mode: reason (briefly), then answer
            reply = f"Adding it up.{THINK_CLOSE}{reply}"
        return reply


def load_answers(path: str, rate: float, seed: int) -> Answers:
    """FILE's questions, exactly round(rate x n) of them answered correctly."""
    if not 0 <= rate <= 1:
        raise ConfigError(f"--answer-rate {rate}: give a fraction in [0, 1]")
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise ConfigError(f"--answers {path}: {exc.strerror or exc}") from None
    items: list[tuple[str, str]] = []
    for number, line in enumerate(lines, 1):
        if not line.strip() or line.startswith(b"#"):
            continue
        try:
            value = orjson.loads(line)
            items.append((value["question"], value["answer"].split("#### ")[-1].strip()))
        except (orjson.JSONDecodeError, KeyError, TypeError, AttributeError):
            raise ConfigError(
                f"--answers {path}:{number}: not a GSM8K line (question, answer)"
            ) from None
    correct = set(
        np.random.default_rng([seed, 8]).permutation(len(items))[: round(rate * len(items))]
    )
    return Answers(
        {
            question: f"Working it out step by step.\n#### {gold if i in correct else gold + '1'}"
            for i, (question, gold) in enumerate(items)
        }
    )


def scripted_tokens(
    text: str, encode: Callable[[str], tuple[list[int], list[tuple[int, int]]]]
) -> tuple[list[int], list[str]]:
    """`text` as token ids and the text each streams (the pieces join to `text`)."""
    ids, offsets = encode(text)
    starts = [start for start, _ in offsets] + [len(text)]
    starts[0] = 0
    return ids, [text[starts[i] : starts[i + 1]] for i in range(len(ids))]
