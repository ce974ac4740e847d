"""Prompt lengths fitted by re-tokenizing: the construction for tokenizers without a word pool.

When words merge with their neighbours (no pre-tokenizer cuts at spaces) or the
vocabulary has too few single-token words, a content cannot be counted by construction.
Then, as vLLM's random dataset does, content is drawn as random token ids, decoded to
text, and the whole prompt (template included) is re-tokenized; the content is cut or
extended by the difference and measured again until the count is the target. A prompt
that still misses after `MAX_ROUNDS` keeps the closest length found, and its true count
is what is reported: `Prompt.num_tokens` is always a measured count, never a guess.

Units are ids whose text is printable, holds no character that special tokens are
written with, and encodes back to that one id: decoding random ids gives text, not
fragments of characters or a special token spelled out.
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

MAX_ROUNDS = 16  # measure-and-adjust rounds per prompt; most prompts need 1 to 3
_SPECIAL_MARKS = frozenset("<>|[]{}\\")


@dataclass(frozen=True, slots=True)
class FitUnits:
    """Token ids that decode to clean text and encode back to themselves."""

    ids: npt.NDArray[np.int64]
    openers: npt.NDArray[np.int64]  # those whose text does not start with a space
    # Tokens per unit once decoded text is re-encoded (merges make it differ from 1),
    # measured once on a fixed sample: prompts start near their length (and the same
    # seed gives the same prompts whatever ran before).
    ratio: float


@dataclass(frozen=True, slots=True)
class Fitted:
    content: str
    num_tokens: int  # measured: tokens of prefix + content + suffix


_units: weakref.WeakKeyDictionary[Tokenizer, FitUnits] = weakref.WeakKeyDictionary()
_RATIO_SAMPLE = 4096  # units decoded and re-encoded to measure the ratio


def fit_units(tokenizer: Tokenizer) -> FitUnits:
    """The tokenizer's clean units, found on first use and kept while the tokenizer lives."""
    units = _units.get(tokenizer)
    if units is None:
        units = _units[tokenizer] = _find_units(tokenizer)
    return units


def _find_units(tokenizer: Tokenizer) -> FitUnits:
    ids = sorted(tokenizer.get_vocab(with_added_tokens=False).values())
    texts = tokenizer.decode_batch([[i] for i in ids], skip_special_tokens=False)
    clean = [
        (i, t)
        for i, t in zip(ids, texts, strict=True)
        if t.strip()
        and t.isprintable()
        and "\ufffd" not in t
        and not _SPECIAL_MARKS.intersection(t)
    ]
    encoded = tokenizer.encode_batch([t for _, t in clean], add_special_tokens=False)
    kept = [(i, t) for (i, t), e in zip(clean, encoded, strict=True) if e.ids == [i]]
    if not kept:
        raise ValueError("no token of this tokenizer decodes to text that encodes back to it")
    openers = [i for i, t in kept if not t[0].isspace()] or [i for i, _ in kept]
    unit_ids = np.array([i for i, _ in kept], dtype=np.int64)
    sample = np.random.default_rng(0).choice(unit_ids, size=_RATIO_SAMPLE).tolist()
    tokens = _count(tokenizer, [tokenizer.decode(sample, skip_special_tokens=False)])[0]
    ratio = min(4.0, max(0.25, tokens / _RATIO_SAMPLE))
    return FitUnits(unit_ids, np.array(openers, dtype=np.int64), ratio)


def fit_contents(
    tokenizer: Tokenizer,
    prefix: str,
    suffix: str,
    targets: Sequence[int],
    opening: Sequence[Sequence[int]],
    rng: np.random.Generator,
) -> list[Fitted]:
    """One content per target such that prefix + content + suffix has that many tokens
    (or the closest count found). `opening[i]` are the first unit ids of content i
    (distinct openings are chosen by the caller); the rest are drawn from rng."""
    units = fit_units(tokenizer)
    ratio = units.ratio
    base = _count(tokenizer, [prefix + suffix])[0]
    ids = [list(head) for head in opening]
    for i, target in enumerate(targets):
        missing = round((target - base) / ratio) - len(ids[i])
        if missing > 0:
            ids[i].extend(rng.choice(units.ids, size=missing).tolist())
        elif target <= base:
            ids[i] = []
    best: list[Fitted | None] = [None] * len(targets)
    tried: list[set[int]] = [set() for _ in targets]
    active = list(range(len(targets)))
    for _round in range(MAX_ROUNDS):
        if not active:
            break
        contents = [
            c.lstrip()
            for c in tokenizer.decode_batch([ids[i] for i in active], skip_special_tokens=False)
        ]
        counts = _count(tokenizer, [prefix + c + suffix for c in contents])
        still = []
        for i, content, count in zip(active, contents, counts, strict=True):
            held = best[i]
            if held is None or abs(count - targets[i]) < abs(held.num_tokens - targets[i]):
                best[i] = Fitted(content, count)
            if count != targets[i] and _adjust(
                ids[i], count - targets[i], tried[i], units, rng, ratio
            ):
                still.append(i)
        active = still
    return [b for b in best if b is not None]


def _adjust(
    ids: list[int],
    excess: int,
    tried: set[int],
    units: FitUnits,
    rng: np.random.Generator,
    ratio: float,
) -> bool:
    """Cut or extend `ids` by about `excess` tokens; at a length already tried (cutting
    one more overshoots, adding one undershoots) redraw the last few units instead.
    False when nothing can change the count any more."""
    tried.add(len(ids))
    step = max(1, round(abs(excess) / ratio))
    if excess > 0:
        if len(ids) <= 1:
            return False
        del ids[max(1, len(ids) - step) :]
    else:
        ids.extend(rng.choice(units.ids, size=step).tolist())
    if len(ids) in tried and len(ids) > 1:
        redraw = min(len(ids) - 1, 4)
        ids[-redraw:] = rng.choice(units.ids, size=redraw).tolist()
    return True


def _count(tokenizer: Tokenizer, texts: list[str]) -> list[int]:
    return [len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
