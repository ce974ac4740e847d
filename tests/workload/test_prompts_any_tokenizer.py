"""Prompt synthesis with tokenizers other than DeepSeek-V4's (trained here, see
built_tokenizers.py): exact lengths proven by re-encoding every prompt, the construction
each tokenizer gets, and a truthful count where no exact length exists."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models

from loadgen.tokenizer import decode, encode, load_tokenizer
from loadgen.workload.prompts import (
    Prompt,
    build_word_pool,
    synthesis,
    synthesize_prompts,
    template_tokens,
)
from loadgen.workload.wordpool import PREFERRED_WORDS, PoolUnusable

LENGTHS = [1, 2, 3, 7, 64, 255, 1024, 4096]


def tokenizer_named(name: str, built: dict[str, Path]) -> Tokenizer:
    if name == "dsv4":
        return load_tokenizer()
    return load_tokenizer(built[name], check_dsv4=False)


def make(
    tok: Tokenizer, lengths: list[int], *, encoder: str = "raw", seed: int = 0, mode: str = "chat"
) -> list[Prompt]:
    return synthesize_prompts(
        lengths,
        encoder=encoder,
        thinking_mode=mode,
        reasoning_effort=None,
        tokenizer=tok,
        rng=np.random.default_rng(seed),
    )


def measured(tok: Tokenizer, prompts: list[Prompt]) -> list[int]:
    return [
        len(e.ids) for e in tok.encode_batch([p.text for p in prompts], add_special_tokens=False)
    ]


@pytest.mark.parametrize("name", ["bpe4k", "unigram", "dsv4"])
def test_the_three_test_tokenizers_give_exact_lengths_by_construction(
    name: str, built_tokenizers: dict[str, Path]
) -> None:
    tok = tokenizer_named(name, built_tokenizers)
    assert (
        synthesis(encoder="raw", thinking_mode="chat", reasoning_effort=None, tokenizer=tok).method
        == "words"
    )
    lengths = LENGTHS * 3
    prompts = make(tok, lengths)
    assert measured(tok, prompts) == lengths
    assert [p.num_tokens for p in prompts] == lengths and all(p.exact for p in prompts)
    for prompt in prompts[:8]:
        ids = encode(tok, prompt.text)
        assert encode(tok, decode(tok, ids)) == ids  # the text is what its ids say
        assert prompt.text == prompt.content and not prompt.content[:1].isspace()
        assert not {"Ġ", "▁"} & set(prompt.text), "markers are spelling, not text"


def test_dsv4_template_with_the_dsv4_tokenizer_is_still_exact() -> None:
    tok = load_tokenizer()
    smallest = template_tokens(
        encoder="dsv4", thinking_mode="thinking", reasoning_effort=None, tokenizer=tok
    )
    lengths = [smallest, smallest + 1, 100, 3000]
    assert measured(tok, make(tok, lengths, encoder="dsv4", mode="thinking")) == lengths


def test_a_small_byte_level_vocabulary_is_enough(built_tokenizers: dict[str, Path]) -> None:
    """The 4k BPE has fewer plain single-token words than a big vocabulary's 1,000 short
    ones: longer words are taken, and openings widen to stay distinct."""
    tok = tokenizer_named("bpe4k", built_tokenizers)
    pool = build_word_pool(tok)
    assert 64 <= len(pool.first) < 5_000 and len(pool.later) >= 64
    prompts = make(tok, [40] * 5120)
    assert measured(tok, prompts) == [40] * 5120
    words = len(pool.first)
    width = 1 if words >= 5120 else 2
    heads = {tuple(p.content.split(" ")[:width]) for p in prompts}
    assert len(heads) == 5120, "every prompt opens differently: no shared prefix"


def test_metaspace_words_are_found(built_tokenizers: dict[str, Path]) -> None:
    tok = tokenizer_named("unigram", built_tokenizers)
    pool = build_word_pool(tok)
    vocab = tok.get_vocab()
    # SentencePiece spells " ba" as "▁ba": the pool holds the text, the vocabulary the mark
    assert all("▁" + str(w)[1:] in vocab for w in pool.later[:50])
    assert len(pool.later) >= PREFERRED_WORDS // 2


def test_a_tokenizer_that_merges_words_gets_fitted_exact_prompts(
    built_tokenizers: dict[str, Path],
) -> None:
    tok = tokenizer_named("merging", built_tokenizers)
    with pytest.raises(PoolUnusable, match="merges adjacent words"):
        build_word_pool(tok)
    how = synthesis(encoder="raw", thinking_mode="chat", reasoning_effort=None, tokenizer=tok)
    assert how.method == "fitted" and "merges adjacent words" in (how.reason or "")
    lengths = LENGTHS * 4
    prompts = make(tok, lengths)
    counts = measured(tok, prompts)
    assert [p.num_tokens for p in prompts] == counts, "num_tokens is the re-tokenized count"
    assert counts == lengths and all(p.exact for p in prompts)
    long = [p.text[:12] for p in prompts if p.num_tokens >= 64]
    assert len(set(long)) == len(long) == 16, "distinct openings"
    assert make(tok, lengths, seed=3) == make(tok, lengths, seed=3)


def test_where_no_exact_length_exists_the_true_length_is_reported() -> None:
    """Without a pre-tokenizer a WordLevel model sees one unknown word in any text with a
    space: only 0, 1 or 2 tokens are possible, and the prompt says so."""
    words = {"[unk]": 0} | {
        a + b: i + 1 for i, (a, b) in enumerate((a, b) for a in "abcdefgh" for b in "abcdefgh")
    }
    tok = Tokenizer(models.WordLevel(words, unk_token="[unk]"))
    prompts = make(tok, [1, 5, 300])
    counts = measured(tok, prompts)
    assert [p.num_tokens for p in prompts] == counts
    assert prompts[0].exact and counts[0] == 1
    assert not prompts[2].exact and prompts[2].target == 300 and counts[2] < 300


def test_the_word_pool_of_dsv4_is_unchanged() -> None:
    """The generalized search finds exactly the words the DeepSeek-V4 pool always had."""
    pool = build_word_pool(load_tokenizer())
    assert (len(pool.first), len(pool.later)) == (14867, 9469)
    assert list(pool.first[:3]) == sorted(pool.first)[:3]
