"""Tokenizers that are not DeepSeek-V4's, trained here with HF `tokenizers` on a generated
corpus (no download): the kinds users pass with --tokenizer.

- `bpe4k`: byte-level BPE, 4,096 tokens (GPT-2 style pre-tokenizer): few whole words.
- `unigram`: Unigram with a Metaspace pre-tokenizer (SentencePiece style, `▁word`).
- `merging`: byte-level BPE whose pre-tokenizer does not cut at spaces, so merges span
  words ("Ġba" + "Ġbe" -> one token): no construction can count words, lengths must be
  fitted by re-tokenizing.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

SYLLABLES = [c + v for c in "bcdfghjklmnprstvwz" for v in "aeiou"] + ["th", "st", "ch", "sh"]


def corpus(lines: int, seed: int = 0) -> list[str]:
    """Sentences of made-up words with a Zipf-like frequency, capitals, digits, punctuation."""
    rng = np.random.default_rng(seed)
    syllables = np.array(SYLLABLES)
    words = np.array(
        sorted({"".join(rng.choice(syllables, size=rng.integers(1, 4))) for _ in range(6000)})
    )
    weights = 1 / np.arange(1, len(words) + 1)
    lengths = rng.integers(5, 20, size=lines)
    drawn = words[rng.choice(len(words), size=int(lengths.sum()), p=weights / weights.sum())]
    numbers = rng.integers(0, 2000, size=lines)
    ends = rng.choice([".", ",", "?", "!"], size=lines)
    out, at = [], 0
    for n, number, end in zip(lengths, numbers, ends, strict=True):
        sentence = drawn[at : at + n].tolist()
        at += n
        sentence[0] = sentence[0].capitalize()
        if number % 3 == 0:
            sentence.insert(1, str(number))
        out.append(" ".join(sentence) + end)
    return out


def bpe4k(text: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        text,
        trainers.BpeTrainer(
            vocab_size=4096,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            special_tokens=["<|endoftext|>"],
            show_progress=False,
        ),
    )
    return tokenizer


def unigram(text: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.Unigram())
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    tokenizer.train_from_iterator(
        text,
        trainers.UnigramTrainer(
            vocab_size=4096,
            special_tokens=["<unk>", "<s>", "</s>"],
            unk_token="<unk>",
            show_progress=False,
        ),
    )
    return tokenizer


def merging(text: list[str]) -> Tokenizer:
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    tokenizer.decoder = decoders.ByteLevel()
    tokenizer.train_from_iterator(
        text,
        trainers.BpeTrainer(
            vocab_size=2048,
            initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
            show_progress=False,
        ),
    )
    return tokenizer


def build_all(directory: Path) -> dict[str, Path]:
    """Train the three and save each as directory/<name>/tokenizer.json (a model dir)."""
    text = corpus(20_000)
    paths = {}
    for name, train, lines in (
        ("bpe4k", bpe4k, None),
        ("unigram", unigram, None),
        ("merging", merging, 4_000),
    ):
        tokenizer = train(text if lines is None else text[:lines])
        (directory / name).mkdir(parents=True, exist_ok=True)
        paths[name] = directory / name / "tokenizer.json"
        tokenizer.save(str(paths[name]))
    return paths
