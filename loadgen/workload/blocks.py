"""Trace prompts from `hash_ids`: equal ids give byte-identical token blocks (pure, no I/O).

A trace request says only how long its prompt is (`in` tokens) and which cache blocks it
is made of (`hash_ids`, one per `block_size` tokens). The prompt is rebuilt as one
encoder user turn whose token stream is cut into the same blocks:

    [template prefix][cache-bust marker][words of block 0] | words of block 1 | ... |
    ... words of the last block][template suffix (the generation prompt)]

Block j's tokens are words drawn from a generator seeded by (namespace, hash_ids[j]), each
word exactly one token (workload/prompts.py proves it for the tokenizer), so two requests
whose hash_ids agree on a prefix agree on that prefix's tokens, and each request has
exactly `in` tokens (template and marker included). Block texts are built once and
shared, never one text per request: a 128k-token prompt is a join of ~2,000 shared strings,
rendered when it is sent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadgen.workload.prompts import UserTemplate, WordPool

MARKER_WORDS = 6  # cache-bust marker length in tokens (words from the pool)


@dataclass(frozen=True, slots=True)
class RenderedPrompt:
    content: str  # the user message (marker + block words), for /v1/chat/completions
    text: str  # the whole prompt (template included), for /v1/completions
    num_tokens: int


class BlockText:
    """Block words per (namespace, hash id), built on first use and kept for the run."""

    def __init__(self, pool: WordPool, block_size: int) -> None:
        self.pool = pool
        self.block_size = block_size
        self._indices: dict[tuple[int, int], npt.NDArray[np.int64]] = {}
        self._texts: dict[tuple[int, int], str] = {}
        self._later = pool.later

    def indices(self, namespace: int, hash_id: int) -> npt.NDArray[np.int64]:
        key = (namespace, hash_id)
        found = self._indices.get(key)
        if found is None:
            rng = np.random.default_rng([namespace & 0xFFFFFFFF, hash_id & 0xFFFFFFFFFFFF])
            found = self._indices[key] = rng.integers(0, len(self._later), self.block_size)
        return found

    def words(self, namespace: int, hash_id: int, count: int) -> str:
        """The first `count` words of the block (all of them come from the text cache)."""
        if count == self.block_size:
            key = (namespace, hash_id)
            text = self._texts.get(key)
            if text is None:
                text = self._texts[key] = "".join(
                    self._later[self.indices(namespace, hash_id)].tolist())
            return text
        return "".join(self._later[self.indices(namespace, hash_id)[:count]].tolist())

    def marker(self, key: Sequence[int]) -> str:
        """A cache-bust marker: MARKER_WORDS words drawn from `key` (e.g. run, lane, play)."""
        rng = np.random.default_rng([k & 0xFFFFFFFF for k in key])
        return "".join(self._later[rng.integers(0, len(self._later), MARKER_WORDS)].tolist())

    @property
    def cached_blocks(self) -> int:
        return len(self._indices)


class BlockRenderer:
    """Renders trace requests through the encoder's user-turn template."""

    def __init__(self, blocks: BlockText, template: UserTemplate) -> None:
        self.blocks = blocks
        self.template = template

    @property
    def suffix_tokens(self) -> int:
        return self.template.suffix_tokens

    def min_tokens(self, marker: str) -> int:
        return self.template.tokens + (MARKER_WORDS if marker else 0) + 1

    def render(self, namespace: int, hash_ids: Sequence[int], num_tokens: int,
               marker: str) -> RenderedPrompt:
        """The prompt of `num_tokens` tokens whose blocks follow `hash_ids`.

        Missing hash ids (a trace with fewer ids than blocks) get ids of their own,
        unique to this request's namespace and length, so they share nothing.
        """
        size = self.blocks.block_size
        template = self.template
        head = template.prefix_tokens + (MARKER_WORDS if marker else 0)
        body = num_tokens - template.suffix_tokens  # tokens before the generation prompt
        if body <= head:
            raise ValueError(f"a request of {num_tokens} tokens is shorter than the template "
                             f"and marker ({head + template.suffix_tokens} tokens)")
        parts = [marker]
        position, block = head, head // size  # a long template may fill whole blocks
        while position < body:
            end = min((block + 1) * size, body)
            hash_id = hash_ids[block] if block < len(hash_ids) else _fresh_id(num_tokens, block)
            parts.append(self.blocks.words(namespace, hash_id, end - position))
            position, block = end, block + 1
        content = "".join(parts)
        return RenderedPrompt(content, template.prefix + content + template.suffix, num_tokens)


def _fresh_id(num_tokens: int, block: int) -> int:
    return -(num_tokens * 100_003 + block + 1)  # negative: never a trace's own id


class TheoreticalCache:
    """The prefix-hit tokens an unbounded block cache would give, from hash_ids alone.

    Counted as vLLM counts hits: full blocks only, a block identified by everything
    before it (a chain), a request hitting its longest run of leading cached blocks, at
    most (in - 1) // block_size of them (one token is always computed). A block that
    holds the end of the trace content (where the template's generation prompt starts)
    is identified by that offset too: it equals another request's block only when both
    prompts end there.
    """

    def __init__(self, block_size: int, suffix_tokens: int) -> None:
        self.block_size = block_size
        self.suffix_tokens = suffix_tokens
        self._seen: set[int] = set()

    def observe(self, namespace: int, hash_ids: Sequence[int], num_tokens: int) -> int:
        keys = self._chain(namespace, hash_ids, num_tokens)
        seen = self._seen
        limit = min(len(keys), (num_tokens - 1) // self.block_size)
        hits = 0
        while hits < limit and keys[hits] in seen:
            hits += 1
        seen.update(keys[hits:])
        return hits * self.block_size

    def _chain(self, namespace: int, hash_ids: Sequence[int], num_tokens: int) -> list[int]:
        size = self.block_size
        body = num_tokens - self.suffix_tokens
        keys: list[int] = []
        previous = hash(("trace-prefix", namespace))
        for block in range(num_tokens // size):
            hash_id = hash_ids[block] if block < len(hash_ids) else _fresh_id(num_tokens, block)
            end = body - block * size
            previous = hash((previous, hash_id, end if end < size else None))
            keys.append(previous)
        return keys
