"""Synthetic benchmark prompts of exact token lengths (pure: tokenizer and RNG passed in).

Random vocabulary ids are not usable as text: decode(ids) often re-encodes to other ids (and
another count). So content is built from words proven to be single tokens that never merge
with their neighbours (wordpool.py): the first without a leading space and every later one
with one (" word"). Byte-level BPE (DeepSeek-V4's among them) and Metaspace/SentencePiece
pre-tokenizers cut text at each such space, so a content of n words is exactly n tokens by
construction, and the template's token count is measured once per call. Nothing is
re-encoded per prompt, which is what keeps 5,120 prompts of 8,192 tokens within a couple
of seconds.

A tokenizer without such words (too few, or words merge), or a template whose tokens
depend on its content, gets prompts fitted by re-tokenizing instead (fitted.py): exact
whenever a re-tokenized length can reach the target, otherwise the closest one, whose
true count `Prompt.num_tokens` reports (`Prompt.exact` is then False).

Only the text is stored (no id lists). Prompts of one call start with distinct openings
(first word; first two words, or more, when there are more prompts than first words), so
they share no prefix beyond the template.
"""

from __future__ import annotations

import operator
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt
from tokenizers import Tokenizer

from encoders import get_encoder
from loadgen.workload.fitted import fit_contents, fit_units
from loadgen.workload.wordpool import PoolUnusable, WordPool, build_word_pool, word_pool

__all__ = [
    "PoolUnusable",
    "Prompt",
    "Synthesis",
    "WordPool",
    "build_word_pool",
    "iter_prompts",
    "synthesis",
    "synthesize_prompts",
    "template_tokens",
    "word_pool",
]
FIT_BATCH = 64  # prompts fitted together (one encode_batch per round)


@dataclass(frozen=True, slots=True)
class Prompt:
    """One synthetic prompt: the full encoded prompt text and where the user content lies."""

    text: str  # the whole prompt (BOS and template included), for /v1/completions
    num_tokens: int  # token count of `text`, measured or exact by construction
    content_start: int  # character offsets of the user message content within `text`
    content_end: int
    target: int  # the length asked for; differs from num_tokens only when not exact

    @property
    def content(self) -> str:
        """The user message text (for /v1/chat/completions, where the server templates it)."""
        return self.text[self.content_start : self.content_end]

    @property
    def exact(self) -> bool:
        return self.num_tokens == self.target


@dataclass(frozen=True, slots=True)
class Synthesis:
    """How prompts are built for a tokenizer and template, and why."""

    method: Literal["words", "fitted"]
    reason: str | None  # why not "words", for the results and the user


@dataclass(frozen=True, slots=True)
class _Template:
    prefix: str
    suffix: str
    tokens: int  # tokens of prefix + suffix; content tokens add to it exactly (words)
    synthesis: Synthesis
    pool: WordPool | None  # None: fitted


def _template(
    tokenizer: Tokenizer,
    encoder: str,
    thinking_mode: str,
    reasoning_effort: str | None,
    pool: WordPool | None,
) -> _Template:
    prefix, suffix = get_encoder(encoder).wrap_user(
        "", thinking_mode, reasoning_effort=reasoning_effort
    )
    count = len(tokenizer.encode(prefix, add_special_tokens=False).ids)
    count += len(tokenizer.encode(suffix, add_special_tokens=False).ids)
    if pool is None:
        try:
            pool = word_pool(tokenizer)
        except PoolUnusable as exc:
            return _Template(prefix, suffix, count, Synthesis("fitted", str(exc)), None)
    probes = [("", 0)] + [
        (str(pool.first[i]) + str(pool.later[i % len(pool.later)]), 2)
        for i in range(0, len(pool.first), max(1, len(pool.first) // 16))
    ]
    texts = [prefix + content + suffix for content, _ in probes]
    got = [len(e.ids) for e in tokenizer.encode_batch(texts, add_special_tokens=False)]
    if any(n != count + words for n, (_, words) in zip(got, probes, strict=True)):
        reason = (
            f"the {encoder} template does not tokenize independently of its content "
            "with this tokenizer"
        )
        return _Template(prefix, suffix, count, Synthesis("fitted", reason), None)
    return _Template(prefix, suffix, count, Synthesis("words", None), pool)


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
    return UserTemplate(
        template.prefix, template.suffix, prefix_tokens, template.tokens - prefix_tokens
    )


def template_tokens(
    *, encoder: str, thinking_mode: str, reasoning_effort: str | None, tokenizer: Tokenizer
) -> int:
    """Tokens a prompt has before any content: the smallest valid target length."""
    return _template(tokenizer, encoder, thinking_mode, reasoning_effort, None).tokens


def synthesis(
    *, encoder: str, thinking_mode: str, reasoning_effort: str | None, tokenizer: Tokenizer
) -> Synthesis:
    """Which construction prompts get with this tokenizer and template (and why)."""
    return _template(tokenizer, encoder, thinking_mode, reasoning_effort, None).synthesis


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
    """One prompt per target length, exactly that many tokens (BOS, template included)
    whenever the tokenizer allows it (see `Prompt.exact`).

    Raises ValueError for a length shorter than the template or an unknown encoder;
    EncodingError for a bad mode or effort. Same rng state (seed) and inputs -> identical
    prompts.
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
    template = _template(tokenizer, encoder, thinking_mode, reasoning_effort, pool)
    targets = [_checked_length(length, template.tokens, encoder) for length in lengths]
    if template.pool is None:
        units = fit_units(tokenizer)
        heads = _distinct_heads(len(targets), rng, len(units.openers), len(units.ids))
        return _fit(targets, heads, template, tokenizer, rng)
    heads = _distinct_heads(len(targets), rng, len(template.pool.first), len(template.pool.later))
    return _generate(targets, heads, template, template.pool, rng)


def _generate(
    targets: Sequence[int],
    heads: npt.NDArray[np.int64],
    template: _Template,
    pool: WordPool,
    rng: np.random.Generator,
) -> Iterator[Prompt]:
    start = len(template.prefix)
    for number, target in enumerate(targets):
        words = target - template.tokens
        opening = heads[number, : min(words, heads.shape[1])]
        head = [pool.first[opening[0]], *pool.later[opening[1:]]] if words else []
        tail = pool.later[rng.integers(0, len(pool.later), size=max(words - len(head), 0))]
        content = "".join(head) + "".join(tail.tolist())
        yield Prompt(
            template.prefix + content + template.suffix,
            target,
            start,
            start + len(content),
            target,
        )


def _fit(
    targets: Sequence[int],
    heads: npt.NDArray[np.int64],
    template: _Template,
    tokenizer: Tokenizer,
    rng: np.random.Generator,
) -> Iterator[Prompt]:
    units = fit_units(tokenizer)
    start = len(template.prefix)
    for first in range(0, len(targets), FIT_BATCH):
        batch = targets[first : first + FIT_BATCH]
        openings = [
            [int(units.openers[row[0]]), *units.ids[row[1:]].tolist()]
            for row in heads[first : first + FIT_BATCH]
        ]
        fitted = fit_contents(tokenizer, template.prefix, template.suffix, batch, openings, rng)
        for target, fit in zip(batch, fitted, strict=True):
            yield Prompt(
                template.prefix + fit.content + template.suffix,
                fit.num_tokens,
                start,
                start + len(fit.content),
                target,
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
    count: int, rng: np.random.Generator, firsts: int, laters: int
) -> npt.NDArray[np.int64]:
    """Opening word indices that differ between all `count` prompts: row i holds prompt
    i's first word (an index into `firsts`) and the later words (indices into `laters`).

    Distinct first words while there are enough of them, otherwise distinct (first,
    second, ...) tuples of as few words as make enough of them; drawn without
    replacement, so the choice is still seeded and uniform.
    """
    width, space = 1, firsts
    while space < count:
        if width >= 8 or laters < 2:
            raise ValueError(f"cannot make {count} prompts distinct; synthesize fewer per call")
        width, space = width + 1, space * laters
    picks = rng.choice(space, size=count, replace=False).astype(np.int64)
    heads = np.empty((count, width), dtype=np.int64)
    for column in range(width - 1, 0, -1):
        picks, heads[:, column] = np.divmod(picks, laters)
    heads[:, 0] = picks
    return heads
