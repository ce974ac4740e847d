"""Fixtures the run tests share (a module may define its own of the same name)."""

from __future__ import annotations

import pytest
from tokenizers import Tokenizer

from loadgen.tokenizer import load_tokenizer


@pytest.fixture(scope="module")
def tokenizer() -> Tokenizer:
    """loadgen's default (DeepSeek-V4) tokenizer, once per module."""
    return load_tokenizer()
