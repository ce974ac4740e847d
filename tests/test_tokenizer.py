from __future__ import annotations

import json
from pathlib import Path

import pytest

from loadgen.tokenizer import (
    DSV4_SPECIAL_IDS,
    OFFICIAL_SHA256,
    TokenizerError,
    bundled_tokenizer_path,
    decode,
    encode,
    file_sha256,
    load_tokenizer,
)


def test_bundled_file_is_the_official_one() -> None:
    assert file_sha256(bundled_tokenizer_path()) == OFFICIAL_SHA256


def test_known_vector() -> None:
    tok = load_tokenizer()
    text = "<｜begin▁of▁sentence｜><｜User｜>Hello, 世界<｜Assistant｜></think>"
    assert encode(tok, text) == [0, 128803, 19923, 14, 223, 3427, 128804, 128822]
    assert decode(tok, encode(tok, text)) == text


def test_special_ids_verified() -> None:
    tok = load_tokenizer()
    for text, expected in DSV4_SPECIAL_IDS.items():
        assert tok.token_to_id(text) == expected


def test_model_directory_is_accepted(tmp_path: Path) -> None:
    (tmp_path / "tokenizer.json").write_bytes(bundled_tokenizer_path().read_bytes())
    assert encode(load_tokenizer(tmp_path), "hi") == encode(load_tokenizer(), "hi")


def test_wrong_tokenizer_is_refused(tmp_path: Path) -> None:
    from tokenizers import Tokenizer, models

    other = Tokenizer(models.WordLevel({"a": 0, "<unk>": 1}, unk_token="<unk>"))
    path = tmp_path / "tokenizer.json"
    other.save(str(path))
    with pytest.raises(TokenizerError, match="not a DeepSeek-V4 tokenizer"):
        load_tokenizer(path)
    assert load_tokenizer(path, check_dsv4=False).token_to_id("a") == 0


def test_missing_path_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(TokenizerError, match=r"no tokenizer\.json"):
        load_tokenizer(tmp_path / "nope")


def test_corrupt_file_is_a_clear_error(tmp_path: Path) -> None:
    path = tmp_path / "tokenizer.json"
    path.write_text(json.dumps({"not": "a tokenizer"}))
    with pytest.raises(TokenizerError, match="cannot load tokenizer"):
        load_tokenizer(path)
