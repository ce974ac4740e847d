"""Single-token words that concatenate exactly: what exact-length prompts are built from.

A vocabulary writes "a word after a space" its own way: byte-level BPE as `Ġword`,
SentencePiece / Metaspace as `▁word`, some as ` word`. The candidates are the lowercase
ASCII words found in the vocabulary under any of these marks (or none); which of them
are usable is then decided by encoding, never by the spelling: `first` words (no leading
space, they open a content) and `later` words (" word") must each encode to one token,
and words must not merge with their neighbours. When the pre-tokenizer cuts at each
space (byte-level's regex, Metaspace's split), that holds by construction; the checks
prove it on the tokenizer given (pairs of words, and one long run of them).

A tokenizer with too few such words, or one that merges words, gets `PoolUnusable`
with the reason; prompt synthesis then fits lengths by re-tokenizing instead (fitted.py).
"""

from __future__ import annotations

import re
import weakref
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

# How a vocabulary marks "preceded by a space": byte-level, Metaspace, plain.
_ENTRY = re.compile(r"(Ġ|▁| )?([a-z]{1,12})")
# Short words keep prompts small in memory (text is stored, ~5 characters per token).
# Candidates come in tiers, cheapest and likeliest first: a big vocabulary is done after
# the first tier; a small one goes on to the other spelling and to longer words.
_FIRST_TIERS = (("plain", 2, 8), ("marked", 2, 8), ("any", 9, 12))
_LATER_TIERS = (("marked", 1, 5), ("plain", 1, 5), ("any", 6, 12))
PREFERRED_WORDS = 1000  # enough words: later tiers are not looked at
MIN_WORDS = 64  # fewer: prompts would repeat a handful of words (n-gram drafters feast)


class PoolUnusable(ValueError):
    """The tokenizer's vocabulary gives no set of words that concatenate exactly."""


@dataclass(frozen=True, slots=True)
class WordPool:
    """Words that each encode to one token: `first` opens a content, `later` ones follow."""

    first: npt.NDArray[np.object_]  # object array of str, no leading space
    later: npt.NDArray[np.object_]  # object array of str, each " word"


_pools: weakref.WeakKeyDictionary[Tokenizer, WordPool | PoolUnusable] = weakref.WeakKeyDictionary()


def word_pool(tokenizer: Tokenizer) -> WordPool:
    """The tokenizer's word pool, built on first use and kept while the tokenizer lives;
    raises PoolUnusable (also remembered) when the tokenizer has none."""
    pool = _pools.get(tokenizer)
    if pool is None:
        try:
            pool = build_word_pool(tokenizer)
        except PoolUnusable as exc:
            pool = exc
        _pools[tokenizer] = pool
    if isinstance(pool, PoolUnusable):
        raise pool
    return pool


def build_word_pool(tokenizer: Tokenizer) -> WordPool:
    """Collect single-token words from the vocabulary and prove they concatenate exactly."""
    entries = [
        m for s in tokenizer.get_vocab(with_added_tokens=False) if (m := _ENTRY.fullmatch(s))
    ]
    first = _collect(tokenizer, entries, _FIRST_TIERS, space="")
    later = _collect(tokenizer, entries, _LATER_TIERS, space=" ")
    if len(first) < MIN_WORDS or len(later) < MIN_WORDS:
        raise PoolUnusable(
            f"too few single-token lowercase words ({len(first)} plain, {len(later)} "
            f"space-prefixed; exact construction needs {MIN_WORDS} of each)"
        )
    # Each first word followed by a later word, and every later word after another, must
    # add up exactly: the concatenation property the construction relies on.
    pairs = [f + later[i % len(later)] for i, f in enumerate(first)]
    run = "".join(later[::-1]) + "".join(later)
    counts = [len(e.ids) for e in tokenizer.encode_batch([*pairs, run], add_special_tokens=False)]
    broken = [pairs[i] for i, n in enumerate(counts[:-1]) if n != 2]
    if broken or counts[-1] != 2 * len(later):
        example = repr(broken[0]) if broken else "a run of space-prefixed words"
        raise PoolUnusable(f"the tokenizer merges adjacent words (e.g. in {example})")
    return WordPool(first=np.array(first, dtype=object), later=np.array(later, dtype=object))


def _collect(
    tokenizer: Tokenizer,
    entries: list[re.Match[str]],
    tiers: tuple[tuple[str, int, int], ...],
    *,
    space: str,
) -> list[str]:
    """Sorted words (`space` + letters) that encode to one token, tier by tier until
    PREFERRED_WORDS are found."""
    found: set[str] = set()
    for spelling, shortest, longest in tiers:
        letters = {
            m.group(2)
            for m in entries
            if shortest <= len(m.group(2)) <= longest
            and (spelling == "any" or (m.group(1) is None) == (spelling == "plain"))
        }
        words = sorted({space + w for w in letters} - found)
        encoded = tokenizer.encode_batch(words, add_special_tokens=False) if words else []
        found.update(w for w, e in zip(words, encoded, strict=True) if len(e.ids) == 1)
        if len(found) >= PREFERRED_WORDS:
            break
    return sorted(found)
