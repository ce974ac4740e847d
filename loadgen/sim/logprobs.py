"""`logprobs` objects in vLLM 0.32's shapes, with deterministic fake values.

The simulator has no model, so a token's logprob is a fixed function of its id (and an
alternative's of its rank): the same request always streams the same numbers. Shapes:
- /v1/completions (`"logprobs": N`): {"text_offset": [...], "token_logprobs": [...],
  "tokens": [...], "top_logprobs": [{sampled: lp, alt1: lp, ...}, ...]}, one entry per
  token of the chunk; text_offset counts characters of the whole output so far; each
  top_logprobs dict holds the sampled token plus N alternatives (captured: 2 keys at N=1
  when the sampled token is not the most likely).
- /v1/chat/completions (`"logprobs": true, "top_logprobs": N`): {"content": [{"token",
  "logprob", "bytes", "top_logprobs": [{"token", "logprob", "bytes"} x N]}]}.
The alternatives are more likely than the sampled token, so they never collide with it.
A token's string is its streamed text (a byte fragment of a multi-byte character
streams "" until the character completes).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import orjson

MAX_LOGPROBS = 20  # vLLM's default --max-logprobs
_SPREAD = 9973


def fake_logprob(token_id: int) -> float:
    """A deterministic logprob in [-9.974, -0.001] for a sampled token."""
    return -(1 + (token_id * 2654435761) % _SPREAD) / 1000.0


class LogprobsBuilder:
    """One request's logprobs objects, chunk by chunk (keeps the running text offset)."""

    __slots__ = ("_alternatives", "_chat", "_offset", "_top")

    def __init__(self, *, chat: bool, top: int, alternatives: Sequence[str]) -> None:
        if top > len(alternatives):
            raise ValueError("fewer alternative tokens than top_logprobs asks for")
        self._chat = chat
        self._top = top
        self._alternatives = tuple(alternatives)
        self._offset = 0

    def _alts(self, token_id: int, text: str, logprob: float) -> list[tuple[str, float]]:
        """`top` alternatives, each likelier than the sampled token, none equal to it."""
        pool = self._alternatives
        alts: list[tuple[str, float]] = []
        position = token_id % len(pool) if pool else 0
        while len(alts) < self._top:
            candidate = pool[position % len(pool)]
            position += 1
            if candidate != text and all(candidate != seen for seen, _ in alts):
                alts.append((candidate, logprob * (len(alts) + 1) / (self._top + 1)))
        return alts

    def chunk(self, ids: Sequence[int], texts: Sequence[str]) -> bytes:
        """The JSON of the logprobs object for these tokens (in stream order)."""
        return orjson.dumps(self.chunk_object(ids, texts))

    def chunk_object(self, ids: Sequence[int], texts: Sequence[str]) -> dict[str, Any]:
        if self._chat:
            return {"content": [self._chat_entry(i, t) for i, t in zip(ids, texts, strict=True)]}
        offsets: list[int] = []
        logprobs: list[float] = []
        tops: list[dict[str, float]] = []
        for token_id, text in zip(ids, texts, strict=True):
            offsets.append(self._offset)
            self._offset += len(text)
            logprob = fake_logprob(token_id)
            logprobs.append(logprob)
            top = {text: logprob}
            top.update(self._alts(token_id, text, logprob))
            tops.append(top)
        return {
            "text_offset": offsets,
            "token_logprobs": logprobs,
            "tokens": list(texts),
            "top_logprobs": tops,
        }

    def _chat_entry(self, token_id: int, text: str) -> dict[str, Any]:
        logprob = fake_logprob(token_id)
        top = [
            {"token": alt, "logprob": alt_logprob, "bytes": list(alt.encode())}
            for alt, alt_logprob in self._alts(token_id, text, logprob)
        ]
        return {
            "token": text,
            "logprob": logprob,
            "bytes": list(text.encode()),
            "top_logprobs": top,
        }
