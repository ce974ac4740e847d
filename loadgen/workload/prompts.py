"""Synthetic benchmark prompts of exact token lengths (pure: tokenizer and RNG passed in).

Random vocabulary ids are not usable as text: decode(ids) often re-encodes to other ids (and
another count). So content is built from words proven to be single tokens that never merge
with their neighbours: lowercase ASCII words, the first without a leading space and every
later one with one (" word"). The DeepSeek-V4 pre-tokenizer cuts text at each such space
(and at every special token), so a content of n words is exactly n tokens by construction;
`build_word_pool` checks that property on the tokenizer it is given, and the template's
token count is measured once per call. Nothing is re-encoded per prompt, which is what
keeps 5,120 prompts of 8,192 tokens within a couple of seconds.

Only the text is stored (no id lists). Prompts of one call start with distinct first words
(distinct first two words when there are more prompts than first words), so they share no
prefix beyond the template.
"""

from __future__ import annotations

import operator
import re
import weakref
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from encoders import get_encoder

# Short words keep prompts small in memory (text is stored, ~5 characters per token) while
# leaving thousands of distinct words to draw from.
_FIRST_WORD = re.compile(r"[a-z]{2,8}")
_LATER_WORD = re.compile(r"(?:Ġ|▁| )([a-z]{1,5})")  # byte-level / metaspace / plain space
_MIN_WORDS = 1000


@dataclass(frozen=True, slots=True)
class Prompt:
    """One synthetic prompt: the full encoded prompt text and where the user content lies."""

    text: str  # the whole prompt (BOS and template included), for /v1/completions
    num_tokens: int  # exact token count of `text`
    content_start: int  # character offsets of the user message content within `text`
    content_end: int

    @property
    def content(self) -> str:
        """The user message text (for /v1/chat/completions, where the server templates it)."""
        return self.text[self.content_start : self.content_end]


@dataclass(frozen=True, slots=True)
class WordPool:
    """Words that each encode to one token: `first` opens a content, `later` ones follow."""

    first: npt.NDArray[np.object_]  # object array of str, no leading space
    later: npt.NDArray[np.object_]  # object array of str, each " word"


_pools: weakref.WeakKeyDictionary[Tokenizer, WordPool] = weakref.WeakKeyDictionary()


def word_pool(tokenizer: Tokenizer) -> WordPool:
    """The tokenizer's word pool, built on first use and kept while the tokenizer lives."""
    pool = _pools.get(tokenizer)
    if pool is None:
        pool = _pools[tokenizer] = build_word_pool(tokenizer)
    return pool


def build_word_pool(tokenizer: Tokenizer) -> WordPool:
    """Collect single-token words from the vocabulary and prove they concatenate exactly."""
    vocab = tokenizer.get_vocab(with_added_tokens=False)
    first = sorted({s for s in vocab if _FIRST_WORD.fullmatch(s)})
    later = sorted({" " + m.group(1) for s in vocab if (m := _LATER_WORD.fullmatch(s))})
    first = _single_tokens(tokenizer, first)
    later = _single_tokens(tokenizer, later)
    if len(first) < _MIN_WORDS or len(later) < _MIN_WORDS:
        raise ValueError(
            f"this tokenizer has too few single-token lowercase words for prompt synthesis "
            f"({len(first)} plain, {len(later)} space-prefixed; need {_MIN_WORDS} of each); "
            "use the DeepSeek-V4 tokenizer or a byte-level BPE tokenizer"
        )
    # Each first word followed by a later word, and every later word after another, must
    # add up exactly: the concatenation property the construction relies on.
    pairs = [f + later[i % len(later)] for i, f in enumerate(first)]
    run = "".join(later[::-1]) + "".join(later)
    counts = [len(e.ids) for e in tokenizer.encode_batch([*pairs, run], add_special_tokens=False)]
    broken = [pairs[i] for i, n in enumerate(counts[:-1]) if n != 2]
    if broken or counts[-1] != 2 * len(later):
        raise ValueError(
            "this tokenizer merges adjacent words (e.g. "
            f"{broken[:3] or 'in a run of space-prefixed words'}), so exact prompt lengths "
            "cannot be synthesized with it"
        )
    return WordPool(first=np.array(first, dtype=object), later=np.array(later, dtype=object))


def _single_tokens(tokenizer: Tokenizer, words: list[str]) -> list[str]:
    encoded = tokenizer.encode_batch(words, add_special_tokens=False)
    return [w for w, e in zip(words, encoded, strict=True) if len(e.ids) == 1]


@dataclass(frozen=True, slots=True)
class _Template:
    prefix: str
    suffix: str
    tokens: int  # tokens of prefix + suffix; content tokens add to it exactly


def _template(
    tokenizer: Tokenizer,
    encoder: str,
    thinking_mode: str,
    reasoning_effort: str | None,
    pool: WordPool,
) -> _Template:
    prefix, suffix = get_encoder(encoder).wrap_user(
        "", thinking_mode, reasoning_effort=reasoning_effort
    )
    count = len(tokenizer.encode(prefix, add_special_tokens=False).ids)
    count += len(tokenizer.encode(suffix, add_special_tokens=False).ids)
    probe = str(pool.first[0]) + str(pool.later[0])
    for content, words in (("", 0), (probe, 2)):
        got = len(tokenizer.encode(prefix + content + suffix, add_special_tokens=False).ids)
        if got != count + words:
            raise ValueError(
                f"the {encoder} template does not tokenize independently of its content with "
                "this tokenizer, so exact prompt lengths cannot be synthesized"
            )
    return _Template(prefix, suffix, count)


@dataclass(frozen=True, slots=True)
class UserTemplate:
    """The encoder's one-user-turn frame, with its tokens counted on each side."""

    prefix: str
    suffix: str
    prefix_tokens: int
    suffix_tokens: int

    @property
    def tokens(self) -> int:
        return self.prefix_tokens + self.suffix_tokens


def user_template(
    *, encoder: str, thinking_mode: str, reasoning_effort: str | None, tokenizer: Tokenizer
) -> UserTemplate:
    """The frame trace prompts are rendered in (checked to tokenize apart from content)."""
    pool = word_pool(tokenizer)
    template = _template(tokenizer, encoder, thinking_mode, reasoning_effort, pool)
    prefix_tokens = len(tokenizer.encode(template.prefix, add_special_tokens=False).ids)
    return UserTemplate(template.prefix, template.suffix, prefix_tokens,
                        template.tokens - prefix_tokens)


def template_tokens(
    *, encoder: str, thinking_mode: str, reasoning_effort: str | None, tokenizer: Tokenizer
) -> int:
    """Tokens a prompt has before any content: the smallest valid target length."""
    pool = word_pool(tokenizer)
    return _template(tokenizer, encoder, thinking_mode, reasoning_effort, pool).tokens


def synthesize_prompts(
    lengths: Sequence[int],
    *,
    encoder: str,
    thinking_mode: str,
    reasoning_effort: str | None,
    tokenizer: Tokenizer,
    rng: np.random.Generator,
    pool: WordPool | None = None,
) -> list[Prompt]:
    """One prompt per target length, each exactly that many tokens (BOS, template included).

    Raises ValueError for a length shorter than the template, an unknown encoder, or a
    tokenizer that cannot give exact lengths; EncodingError for a bad mode or effort.
    Same rng state (seed) and inputs -> identical prompts.
    """
    return list(
        iter_prompts(
            lengths,
            encoder=encoder,
            thinking_mode=thinking_mode,
            reasoning_effort=reasoning_effort,
            tokenizer=tokenizer,
            rng=rng,
            pool=pool,
        )
    )


def iter_prompts(
    lengths: Sequence[int],
    *,
    encoder: str,
    thinking_mode: str,
    reasoning_effort: str | None,
    tokenizer: Tokenizer,
    rng: np.random.Generator,
    pool: WordPool | None = None,
) -> Iterator[Prompt]:
    """`synthesize_prompts`, one prompt at a time: a caller that turns each prompt into a
    request body and drops it holds one prompt's text, while all prompts of the call still
    get distinct openings. Arguments are checked now; rng is drawn from as prompts are taken
    (same prompts as synthesize_prompts as long as nothing else draws from rng meanwhile).
    """
    pool = word_pool(tokenizer) if pool is None else pool
    template = _template(tokenizer, encoder, thinking_mode, reasoning_effort, pool)
    targets = [_checked_length(length, template.tokens, encoder) for length in lengths]
    heads = _distinct_heads(len(targets), rng, len(pool.first), len(pool.later))
    return _generate(targets, heads, template, pool, rng)


def _generate(
    targets: Sequence[int],
    heads: tuple[npt.NDArray[np.int64], npt.NDArray[np.int64] | None],
    template: _Template,
    pool: WordPool,
    rng: np.random.Generator,
) -> Iterator[Prompt]:
    firsts, seconds = heads
    start = len(template.prefix)
    for number, target in enumerate(targets):
        words = target - template.tokens
        head = [pool.first[firsts[number]]] if words else []
        if seconds is not None and words >= 2:
            head.append(pool.later[seconds[number]])
        tail = pool.later[rng.integers(0, len(pool.later), size=max(words - len(head), 0))]
        content = "".join(head) + "".join(tail.tolist())
        yield Prompt(
            template.prefix + content + template.suffix, target, start, start + len(content)
        )


def _checked_length(length: int, template_tokens: int, encoder: str) -> int:
    try:
        value = operator.index(length)
    except TypeError:
        raise ValueError(f"input length must be an integer, got {length!r}") from None
    if value < template_tokens:
        raise ValueError(
            f"input length {value} is shorter than the {encoder} prompt template itself "
            f"({template_tokens} tokens); use an input length of at least {template_tokens}"
        )
    return value


def _distinct_heads(
    count: int, rng: np.random.Generator, firsts: int, seconds: int
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64] | None]:
    """Opening word indices that differ between all `count` prompts.

    Distinct first words while there are enough of them, otherwise distinct (first, second)
    pairs; both drawn without replacement, so the choice is still seeded and uniform.
    """
    if count <= firsts:
        return rng.choice(firsts, size=count, replace=False), None
    if count > firsts * seconds:
        raise ValueError(f"cannot make {count} prompts distinct; synthesize fewer per call")
    pairs = rng.choice(firsts * seconds, size=count, replace=False)
    return pairs // seconds, pairs % seconds
