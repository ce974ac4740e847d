"""Generated tokens: real vocabulary ids with a precomputed text per token.

Detokenization must be cheap (it runs for every chunk on the engine loop) and exact
(the concatenated streamed text equals decoding all generated ids). Both hold because
every generated unit is either one "clean" token, whose bytes are complete UTF-8 and so
decode to the same text alone or in context (byte-level BPE decodes by concatenating
bytes), or a multi-byte character spelled with single-byte tokens: its leading tokens
get text "" and its last token the whole character, which is what vLLM's incremental
detokenizer streams (an empty-text chunk when a chunk ends inside a character).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
from tokenizers import Tokenizer

# The vocabulary below this id is BPE tokens; above are DeepSeek special/added tokens.
FIRST_ADDED_ID = 128000
EOS_ID = 1
BOS_ID = 0
CLEAN_POOL_SIZE = 8192
FRAGMENT_CHARS = 64
# The table is a property of the tokenizer, not of a run: a fixed seed keeps it stable.
TABLE_SEED = 20260401


@dataclass(frozen=True, slots=True)
class Unit:
    """One generated character run: token ids and the text each one streams."""

    ids: tuple[int, ...]
    texts: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class TokenTable:
    clean: tuple[Unit, ...]
    fragments: tuple[Unit, ...]
    eos_id: int = EOS_ID
    _units: tuple[Unit, ...] = field(init=False, repr=False, compare=False)
    _lengths: np.ndarray = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        units = (*self.clean, *self.fragments)
        object.__setattr__(self, "_units", units)
        object.__setattr__(self, "_lengths", np.array([len(u.ids) for u in units]))

    def generate(
        self, rng: np.random.Generator, count: int, fragment_fraction: float
    ) -> tuple[list[int], list[str]]:
        """`count` token ids and their streamed texts; a fragment never straddles the end."""
        if count <= 0:
            return [], []
        clean = len(self.clean)
        picks = rng.integers(0, clean, size=count)
        if fragment_fraction > 0 and self.fragments:
            is_fragment = rng.random(count) < fragment_fraction
            fragment_picks = rng.integers(0, len(self.fragments), size=count)
            picks = np.where(is_fragment, clean + fragment_picks, picks)
        # Whole units while they fit; any shortfall (a fragment that would straddle the
        # end) is filled with clean tokens.
        ends = np.cumsum(self._lengths[picks])
        fitting = int(np.searchsorted(ends, count, side="right"))
        units = self._units
        chosen = [units[i] for i in picks[:fitting].tolist()]
        shortfall = count - (int(ends[fitting - 1]) if fitting else 0)
        chosen += [self.clean[i] for i in rng.integers(0, clean, size=shortfall).tolist()]
        ids = [i for unit in chosen for i in unit.ids]
        texts = [t for unit in chosen for t in unit.texts]
        return ids, texts


def _byte_to_symbol() -> dict[int, str]:
    """GPT-2 byte-level alphabet: the vocabulary symbol for each raw byte."""
    printable = [
        *range(ord("!"), ord("~") + 1),
        *range(ord("¡"), ord("¬") + 1),
        *range(ord("®"), ord("ÿ") + 1),
    ]
    codes = list(printable)
    extra = 0
    for byte in range(256):
        if byte not in printable:
            printable.append(byte)
            codes.append(256 + extra)
            extra += 1
    return {byte: chr(code) for byte, code in zip(printable, codes, strict=True)}


def _clean_units(tokenizer: Tokenizer, rng: np.random.Generator) -> tuple[Unit, ...]:
    candidates = rng.choice(FIRST_ADDED_ID, size=CLEAN_POOL_SIZE * 2, replace=False).tolist()
    texts = tokenizer.decode_batch([[i] for i in candidates], skip_special_tokens=False)
    units = [
        Unit((i,), (t,)) for i, t in zip(candidates, texts, strict=True) if t and "\ufffd" not in t
    ]
    return tuple(units[:CLEAN_POOL_SIZE])


def _fragment_units(tokenizer: Tokenizer, rng: np.random.Generator) -> tuple[Unit, ...]:
    symbols = _byte_to_symbol()
    byte_ids = {b: tokenizer.token_to_id(s) for b, s in symbols.items()}
    units: list[Unit] = []
    # CJK ideographs are 3 UTF-8 bytes each; spelled byte by byte they stream "", "", char.
    for code in rng.choice(np.arange(0x4E00, 0x9FA6), size=FRAGMENT_CHARS, replace=False):
        char = chr(int(code))
        maybe_ids = [byte_ids[b] for b in char.encode("utf-8")]
        ids = tuple(i for i in maybe_ids if i is not None)
        if (
            len(ids) != len(maybe_ids)
            or tokenizer.decode(list(ids), skip_special_tokens=False) != char
        ):
            continue
        units.append(Unit(ids, ("",) * (len(ids) - 1) + (char,)))
    return tuple(units)


def build_token_table(tokenizer: Tokenizer) -> TokenTable:
    rng = np.random.default_rng(TABLE_SEED)
    return TokenTable(clean=_clean_units(tokenizer, rng), fragments=_fragment_units(tokenizer, rng))
