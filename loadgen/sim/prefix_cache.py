"""Automatic prefix caching as vLLM v1 does it: hashed full blocks in an LRU pool.

A prompt's token ids are cut into full blocks of `block_size` tokens; block b's hash
chains the hash of block b-1 with its own tokens, so equal hashes mean equal prefixes.
When a request is first scheduled, its cached prefix is the longest run of leading
blocks found in the pool, capped (like vLLM) so at least one prompt token is computed:
that is `num_cached_tokens`, and only the rest is prefilled. The request's blocks enter
the pool as the prefill that fills them is scheduled (vLLM caches a block when it is
allocated full), so a later request hits them even before the earlier one has finished.
Only prompt blocks are cached: blocks of generated tokens (which vLLM also caches) are
never a prefix of a loadgen prompt, whose history holds the recorded replies.
The pool holds `num_blocks` blocks; the least recently used one is evicted first.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

ROOT_HASH = 0x5EED


def block_hashes(token_ids: Sequence[int], block_size: int) -> list[int]:
    """Chained hashes of every full block of `token_ids`."""
    full = len(token_ids) // block_size
    if full == 0:
        return []
    blocks = np.asarray(token_ids[: full * block_size], dtype=np.int64).reshape(full, block_size)
    hashes: list[int] = []
    previous = ROOT_HASH
    for row in blocks:
        previous = hash((previous, row.tobytes()))
        hashes.append(previous)
    return hashes


class PrefixCache:
    """The block pool: lookups at scheduling, inserts as prefill is scheduled."""

    def __init__(self, block_size: int, num_blocks: int) -> None:
        self.block_size = block_size
        self.num_blocks = num_blocks
        self._pool: OrderedDict[int, None] = OrderedDict()

    def __len__(self) -> int:
        return len(self._pool)

    def clear(self) -> None:
        """POST /reset_prefix_cache: no block is a hit any more."""
        self._pool.clear()

    def lookup(self, hashes: Sequence[int], prompt_len: int) -> int:
        """Tokens of the prompt already cached (whole blocks, at most prompt_len - 1)."""
        limit = min(len(hashes), (prompt_len - 1) // self.block_size)
        pool = self._pool
        hits = 0
        while hits < limit and hashes[hits] in pool:
            pool.move_to_end(hashes[hits])  # a hit is a use: most recently used
            hits += 1
        return hits * self.block_size

    def insert(self, hashes: Sequence[int], start: int, end: int) -> None:
        """Cache blocks [start, end) of a prompt (their tokens are being computed)."""
        pool = self._pool
        for value in hashes[start:end]:
            if value in pool:
                pool.move_to_end(value)
                continue
            pool[value] = None
            if len(pool) > self.num_blocks:
                pool.popitem(last=False)
