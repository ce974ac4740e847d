"""Prompt synthesis: exact lengths proven by re-encoding, stable text, distinct contents."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer, models, pre_tokenizers

from encoders import ENCODERS, EncodingError
from loadgen.tokenizer import decode, encode, load_tokenizer
from loadgen.workload.prompts import (
    PoolUnusable,
    Prompt,
    WordPool,
    build_word_pool,
    iter_prompts,
    synthesize_prompts,
    template_tokens,
    word_pool,
)

MODES = ("chat", "thinking")
EFFORTS = (None, "low", "high", "max")


@pytest.fixture(scope="module")
def tok() -> Tokenizer:
    return load_tokenizer()


def make(
    tok: Tokenizer,
    lengths: list[int],
    *,
    encoder: str = "dsv4",
    mode: str = "thinking",
    effort: str | None = None,
    seed: int = 0,
    pool: WordPool | None = None,
) -> list[Prompt]:
    return synthesize_prompts(
        lengths,
        encoder=encoder,
        thinking_mode=mode,
        reasoning_effort=effort,
        tokenizer=tok,
        rng=np.random.default_rng(seed),
        pool=pool,
    )


def assert_exact(tok: Tokenizer, prompt: Prompt, target: int) -> None:
    ids = encode(tok, prompt.text)
    assert len(ids) == prompt.num_tokens == target
    assert decode(tok, ids) == prompt.text  # the text is what the ids say: round-trip stable
    assert encode(tok, decode(tok, ids)) == ids


@pytest.mark.parametrize("encoder", sorted(ENCODERS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("effort", EFFORTS)
def test_lengths_are_exact_for_every_template(
    tok: Tokenizer, encoder: str, mode: str, effort: str | None
) -> None:
    smallest = template_tokens(
        encoder=encoder, thinking_mode=mode, reasoning_effort=effort, tokenizer=tok
    )
    lengths = [smallest, smallest + 1, smallest + 2, smallest + 7, 300, 1024, 4097]
    for prompt, target in zip(
        make(tok, lengths, encoder=encoder, mode=mode, effort=effort), lengths, strict=True
    ):
        assert_exact(tok, prompt, target)


def test_text_is_the_encoded_user_message(tok: Tokenizer) -> None:
    for encoder in ENCODERS.values():
        for mode in MODES:
            for effort in EFFORTS:
                [prompt] = make(tok, [200], encoder=encoder.name, mode=mode, effort=effort)
                user = [{"role": "user", "content": prompt.content}]
                assert prompt.text == encoder.encode_messages(user, mode, reasoning_effort=effort)
                assert prompt.content and not prompt.content[0].isspace()


def test_template_sizes_are_the_known_token_counts(tok: Tokenizer) -> None:
    def size(encoder: str, mode: str, effort: str | None = None) -> int:
        return template_tokens(
            encoder=encoder, thinking_mode=mode, reasoning_effort=effort, tokenizer=tok
        )

    # BOS, <｜User｜>, <｜Assistant｜>, <think> or </think>
    assert size("dsv4", "chat") == size("dsv4", "thinking") == 4
    assert size("dsv4", "thinking", "high") > size("dsv4", "thinking", "low") == 4
    assert size("dsv4", "chat", "max") == 4  # effort applies to thinking mode only
    assert size("raw", "thinking", "max") == 0


def test_prompts_differ_from_the_first_content_token(tok: Tokenizer) -> None:
    prompts = make(tok, [64] * 3000)
    first_ids = {encode(tok, p.text)[2] for p in prompts[:400]}  # after BOS, <｜User｜>
    assert len(first_ids) == 400
    assert len({p.content.split(" ")[0] for p in prompts}) == len(prompts)


def test_more_prompts_than_first_words_still_differ_in_two_tokens(tok: Tokenizer) -> None:
    full = word_pool(tok)
    small = WordPool(first=full.first[:50], later=full.later)
    prompts = make(tok, [40] * 400, pool=small)
    heads = {tuple(p.content.split(" ")[:2]) for p in prompts}
    assert len(heads) == 400
    for prompt in prompts[::50]:
        assert_exact(tok, prompt, 40)


def test_same_seed_same_prompts_other_seed_other_prompts(tok: Tokenizer) -> None:
    lengths = [100, 2000, 57]
    assert make(tok, lengths, seed=7) == make(tok, lengths, seed=7)
    assert [p.text for p in make(tok, lengths, seed=7)] != [
        p.text for p in make(tok, lengths, seed=8)
    ]


def test_iter_prompts_yields_the_same_prompts_lazily(tok: Tokenizer) -> None:
    lengths = [30, 500, 4, 77] * 100
    options = {
        "encoder": "dsv4", "thinking_mode": "chat", "reasoning_effort": None, "tokenizer": tok,
    }  # fmt: skip
    eager = synthesize_prompts(lengths, rng=np.random.default_rng(5), **options)  # type: ignore[arg-type]
    lazy = iter_prompts(lengths, rng=np.random.default_rng(5), **options)  # type: ignore[arg-type]
    assert next(lazy) == eager[0]
    assert [eager[0], *lazy] == eager
    # openings are distinct over the whole call, not per batch taken from the iterator
    openings = [p.content.split(" ")[0] for p in eager if p.content]
    assert len(set(openings)) == len(openings) == 300


def test_iter_prompts_checks_arguments_before_the_first_prompt(tok: Tokenizer) -> None:
    with pytest.raises(ValueError, match="at least 4"):
        iter_prompts(
            [10, 2], encoder="dsv4", thinking_mode="chat", reasoning_effort=None,
            tokenizer=tok, rng=np.random.default_rng(0),
        )  # fmt: skip


def test_length_equal_to_the_template_gives_empty_content(tok: Tokenizer) -> None:
    [prompt] = make(tok, [4], mode="chat")
    assert prompt.content == ""
    assert prompt.text == "<｜begin▁of▁sentence｜><｜User｜><｜Assistant｜></think>"
    assert_exact(tok, prompt, 4)


def test_length_shorter_than_the_template_is_refused(tok: Tokenizer) -> None:
    with pytest.raises(ValueError, match=r"input length 3 is shorter .* at least 4"):
        make(tok, [100, 3])
    with pytest.raises(ValueError, match="at least"):
        make(tok, [20], effort="max")  # the max-effort prefix alone is longer than 20 tokens


def test_bad_arguments_are_refused(tok: Tokenizer) -> None:
    with pytest.raises(ValueError, match="unknown encoder 'llama'"):
        make(tok, [10], encoder="llama")
    with pytest.raises(EncodingError, match="thinking_mode"):
        make(tok, [10], mode="fast")
    with pytest.raises(EncodingError, match="reasoning_effort"):
        make(tok, [10], effort="medium")
    with pytest.raises(ValueError, match="integer"):
        make(tok, [10.5])  # type: ignore[list-item]


def test_numpy_integer_lengths_are_accepted(tok: Tokenizer) -> None:
    lengths = np.array([10, 4000], dtype=np.int64)
    prompts = make(tok, list(lengths))
    assert [p.num_tokens for p in prompts] == [10, 4000]
    assert all(type(p.num_tokens) is int for p in prompts)


def test_prompt_stores_only_text_and_offsets() -> None:
    names = [f.name for f in dataclasses.fields(Prompt)]
    assert names == ["text", "num_tokens", "content_start", "content_end", "target"]
    prompt = Prompt("abcdef", 2, 1, 4, 2)
    assert not hasattr(prompt, "__dict__")
    assert prompt.content == "bcd" and prompt.exact
    assert not Prompt("abcdef", 2, 1, 4, 3).exact
    with pytest.raises(dataclasses.FrozenInstanceError):
        prompt.text = "x"  # type: ignore[misc]


def test_word_pool_words_are_single_tokens(tok: Tokenizer) -> None:
    pool = build_word_pool(tok)
    assert len(pool.first) > 10_000 and len(pool.later) > 5_000
    rng = np.random.default_rng(3)
    for word in rng.choice(pool.first, 200):
        assert len(encode(tok, str(word))) == 1 and not word.startswith(" ")
    for word in rng.choice(pool.later, 200):
        assert len(encode(tok, str(word))) == 1 and word.startswith(" ")
    assert word_pool(tok) is word_pool(tok)  # built once per tokenizer


def word_level(pre_tokenizer: pre_tokenizers.PreTokenizer | None) -> Tokenizer:
    words = [a + b + c for a in "abcdefghij" for b in "abcdefghij" for c in "abcdefghij"]
    vocab = {"[unk]": 0} | {w: i + 1 for i, w in enumerate(words)}
    vocab |= {" " + w: i + 1 + len(words) for i, w in enumerate(words)}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[unk]"))
    if pre_tokenizer is not None:
        tokenizer.pre_tokenizer = pre_tokenizer
    return tokenizer


def test_another_tokenizer_works_with_the_raw_encoder() -> None:
    tokenizer = word_level(pre_tokenizers.WhitespaceSplit())
    prompts = synthesize_prompts(
        [1, 2, 50],
        encoder="raw",
        thinking_mode="chat",
        reasoning_effort=None,
        tokenizer=tokenizer,
        rng=np.random.default_rng(0),
    )
    assert [len(encode(tokenizer, p.text)) for p in prompts] == [1, 2, 50]


def test_tokenizer_that_merges_words_has_no_word_pool() -> None:
    with pytest.raises(PoolUnusable, match="merges adjacent words"):
        build_word_pool(word_level(None))  # no pre-tokenizer: "abc bcd" is one unknown token


def test_tokenizer_without_words_has_no_word_pool_and_gets_fitted_prompts() -> None:
    tokenizer = Tokenizer(models.WordLevel({"[unk]": 0, "a": 1}, unk_token="[unk]"))
    with pytest.raises(PoolUnusable, match="too few single-token lowercase words"):
        build_word_pool(tokenizer)
    [prompt] = synthesize_prompts(
        [1],
        encoder="raw",
        thinking_mode="chat",
        reasoning_effort=None,
        tokenizer=tokenizer,
        rng=np.random.default_rng(0),
    )
    assert prompt.num_tokens == len(encode(tokenizer, prompt.text)) == 1 and prompt.exact


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(min_value=0, max_value=2500), min_size=1, max_size=6),
    seed=st.integers(min_value=0, max_value=2**32 - 1),
    encoder=st.sampled_from(sorted(ENCODERS)),
    mode=st.sampled_from(MODES),
    effort=st.sampled_from(EFFORTS),
)
def test_property_every_prompt_is_exact(
    tok: Tokenizer, lengths: list[int], seed: int, encoder: str, mode: str, effort: str | None
) -> None:
    smallest = template_tokens(
        encoder=encoder, thinking_mode=mode, reasoning_effort=effort, tokenizer=tok
    )
    targets = [smallest + n for n in lengths]
    prompts = make(tok, targets, encoder=encoder, mode=mode, effort=effort, seed=seed)
    for prompt, target in zip(prompts, targets, strict=True):
        assert_exact(tok, prompt, target)
        prefix, suffix = ENCODERS[encoder].wrap_user(prompt.content, mode, reasoning_effort=effort)
        assert prompt.text == prefix + prompt.content + suffix
