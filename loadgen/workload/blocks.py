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
from operator import itemgetter

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
    """Block texts per (namespace, hash id), built on first use and kept for the run.

    A block's words come from a counter-based hash of (namespace, hash id, position)
    (splitmix64), so a turn's new blocks are drawn in one vectorized step and any block
    can be rebuilt from its key alone. Texts are kept per namespace, keyed by hash id:
    a 128k-token prompt looks up ~2,000 of them per render, in C (itemgetter), with no
    key tuple built per block.
    """

    def __init__(self, pool: WordPool, block_size: int) -> None:
        self.pool = pool
        self.block_size = block_size
        self._texts: dict[int, dict[int, str]] = {}
        self._later = pool.later
        self._positions = np.arange(block_size, dtype=np.uint64) * np.uint64(_GOLDEN)

    def _draw(self, keys: Sequence[tuple[int, int]]) -> npt.NDArray[np.int64]:
        """Word indices, one row per key."""
        spaces = np.array([k[0] & _MASK64 for k in keys], dtype=np.uint64)
        ids = np.array([k[1] & _MASK64 for k in keys], dtype=np.uint64)
        x = (spaces * np.uint64(_MIX1)) ^ (ids * np.uint64(_MIX2))
        x = x[:, None] + self._positions[None, :]
        x = (x ^ (x >> np.uint64(30))) * np.uint64(_MIX1)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(_MIX2)
        x = x ^ (x >> np.uint64(31))
        indices: npt.NDArray[np.int64] = (x % np.uint64(len(self._later))).astype(np.int64)
        return indices

    def texts(self, namespace: int, hash_ids: Sequence[int]) -> tuple[str, ...]:
        """The blocks' texts, in order (built first where missing)."""
        if not hash_ids:
            return ()
        known = self._texts.setdefault(namespace, {})
        missing = [h for h in dict.fromkeys(hash_ids) if h not in known]
        if missing:
            rows = self._later[self._draw([(namespace, h) for h in missing])]
            for hash_id, row in zip(missing, rows, strict=True):
                known[hash_id] = "".join(row.tolist())
        found = itemgetter(*hash_ids)(known)
        return found if len(hash_ids) > 1 else (found,)

    def words(self, namespace: int, hash_id: int, count: int) -> str:
        """The first `count` words of the block."""
        (text,) = self.texts(namespace, (hash_id,))
        if count == self.block_size:
            return text
        return "".join(" " + word for word in text.split(" ")[1 : count + 1])

    def marker(self, key: Sequence[int]) -> str:
        """A cache-bust marker: MARKER_WORDS words drawn from `key` (e.g. run, lane, play)."""
        rng = np.random.default_rng([k & 0xFFFFFFFF for k in key])
        return "".join(self._later[rng.integers(0, len(self._later), MARKER_WORDS)].tolist())

    @property
    def cached_blocks(self) -> int:
        return sum(map(len, self._texts.values()))


_MASK64 = (1 << 64) - 1
_GOLDEN, _MIX1, _MIX2 = 0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB


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

    def render(
        self, namespace: int, hash_ids: Sequence[int], num_tokens: int, marker: str
    ) -> RenderedPrompt:
        """The prompt of `num_tokens` tokens whose blocks follow `hash_ids`.

        Missing hash ids (a trace with fewer ids than blocks) get ids of their own,
        unique to this request's namespace and length, so they share nothing.
        """
        size = self.blocks.block_size
        template = self.template
        head = template.prefix_tokens + (MARKER_WORDS if marker else 0)
        body = num_tokens - template.suffix_tokens  # tokens before the generation prompt
        if body <= head:
            raise ValueError(
                f"a request of {num_tokens} tokens is shorter than the template "
                f"and marker ({head + template.suffix_tokens} tokens)"
            )
        first, last = head // size, (body - 1) // size  # blocks holding content
        ids = list(hash_ids[first : last + 1])
        ids += [_fresh_id(num_tokens, b) for b in range(first + len(ids), last + 1)]
        blocks = self.blocks
        if first == last:
            parts = [marker, blocks.words(namespace, ids[0], body - head)]
        else:
            parts = [marker, blocks.words(namespace, ids[0], (first + 1) * size - head)]
            parts += blocks.texts(namespace, ids[1:-1])
            parts.append(blocks.words(namespace, ids[-1], body - last * size))
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
        # namespace -> (hash ids, keys of its pure-content blocks) of its last request
        self._last: dict[int, tuple[tuple[int, ...], list[int]]] = {}

    def observe(self, namespace: int, hash_ids: Sequence[int], num_tokens: int) -> int:
        keys, reused = self._chain(namespace, hash_ids, num_tokens)
        seen = self._seen
        limit = min(len(keys), (num_tokens - 1) // self.block_size)
        hits = min(reused, limit)  # reused keys were all seen with the previous request
        while hits < limit and keys[hits] in seen:
            hits += 1
        seen.update(keys[hits:])
        return hits * self.block_size

    def _chain(
        self, namespace: int, hash_ids: Sequence[int], num_tokens: int
    ) -> tuple[list[int], int]:
        """Block keys, and how many lead ones were reused: the leading pure-content keys
        of the namespace's previous request, when its hash ids are a prefix of these (a
        session's growing context)."""
        size = self.block_size
        body = num_tokens - self.suffix_tokens
        ids = tuple(hash_ids)
        keys: list[int] = []
        previous = hash(("trace-prefix", namespace))
        last = self._last.get(namespace)
        if last is not None:
            old_ids, old_keys = last
            reuse = min(len(old_keys), body // size, len(ids))
            if reuse and ids[:reuse] == old_ids[:reuse]:
                keys = old_keys[:reuse]
                previous = keys[-1]
        reused = len(keys)
        for block in range(reused, num_tokens // size):
            hash_id = ids[block] if block < len(ids) else _fresh_id(num_tokens, block)
            end = body - block * size
            previous = hash((previous, hash_id, end if end < size else None))
            keys.append(previous)
        self._last[namespace] = (ids, keys[: body // size])
        return keys, reused
