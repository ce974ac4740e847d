"""Shared test fixtures: paths to the reference data in tests/fixtures (see its README)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.support.paths import FIXTURES


@pytest.fixture(scope="session")
def vllm_fixtures() -> Path:
    path = FIXTURES / "vllm_0.32_cpu"
    assert path.is_dir(), f"reference captures missing at {path}"
    return path


@pytest.fixture(scope="session")
def dsv4_fixtures() -> Path:
    path = FIXTURES / "deepseek_v4"
    assert path.is_dir(), f"encoder golden files missing at {path}"
    return path


@pytest.fixture(scope="session")
def built_tokenizers(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Tokenizers trained here (tests/support/built_tokenizers.py), once per session: name ->
    tokenizer.json (in a directory of its own, as a model directory has it)."""
    from tests.support.built_tokenizers import build_all

    return build_all(tmp_path_factory.mktemp("tokenizers"))
